"""Regenerate ``benchmarks/RESULTS.md``, the file the README's performance numbers point to.

Each benchmark runs in a fresh interpreter, as its docstring says, and its output is written verbatim under
its command, with the date, the Python version and the machine's core count, so no claim in the README
drifts from what the code does now:

    python -m benchmarks.results                 # the quick set (a few minutes on 2 cores)
    python -m benchmarks.results --all           # also the long ones (calibration, scale, kernel, ...)
    python -m benchmarks.results --only spam_sklearn import_time
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

#: name -> (command arguments after ``python -m``, what the README cites it for, quick?)
BENCHMARKS = {
    "import_time": (["benchmarks.import_time"], "import time of the package and of the first fit", True),
    "spam_sklearn": (["benchmarks.spam_sklearn"], "BayesianSVC against SVC + GridSearchCV over C", True),
    "toenail": (["benchmarks.toenail"], "toenail VB against statsmodels' BinomialBayesMixedGLM", True),
    "few_large_levels": (
        ["benchmarks.few_large_levels"],
        "a random intercept over a few large levels (Fair affairs): the default fit and its PSIS check against "
        "statsmodels' BinomialBayesMixedGLM",
        True,
    ),
    "gibbs_mixing": (["benchmarks.gibbs_mixing"], "Gibbs mixing: toenail ESS, spam inclusion R-hat, acath", True),
    "gp_terms": (["benchmarks.gp_terms"], "a gp() term on public data (Fair affairs) against LogisticRegression", True),
    "calibration": (["benchmarks.calibration"], "held-out log loss, Brier, ECE against the peers", False),
    "selection_accuracy": (
        ["benchmarks.selection_accuracy"],
        "selection priors: accurate and mean-field VB against Gibbs",
        False,
    ),
    "accurate_gibbs": (
        ["benchmarks.accurate_gibbs"],
        "accurate VB's node weights (EP's or importance-sampled) and PSIS correction against long Gibbs",
        False,
    ),
    "ep_hard": (
        ["benchmarks.ep_hard"],
        "the accurate fit where EP alone is weakest or costs most (correlated slopes, nearly separated groups, crossed "
        "factors) against long Gibbs",
        False,
    ),
    "penalty_from_slopes": (
        ["benchmarks.penalty_from_slopes"],
        "the learned penalty's variance integrated from the slopes against the whole lattice (one and two other "
        "variances), on lme4's Chem97 and mlmRev's guImmun",
        False,
    ),
    "accurate_scale": (
        ["benchmarks.accurate_scale"],
        "the default accurate fits at scale (one and two variance hyperparameters, the learned penalty from the "
        "slopes past 40,000 rows) against mean-field VB and long Gibbs; the default of 10^6 rows",
        False,
    ),
    "scale": (["benchmarks.scale"], "speed at scale against floors and peers", False),
    "crossed": (
        ["benchmarks.crossed"],
        "two large crossed grouping factors (lme4's InstEval; simulated): the default fit, its checks and first "
        "probability beside it, against glmer",
        False,
    ),
    "learned_penalty": (
        ["benchmarks.scale", "--learned-penalty"],
        "learned-penalty VB at 10^6 x 50 against LinearSVC tuned by 5-fold CV over 10 values of C",
        False,
    ),
    "imputation_default": (
        ["benchmarks.imputation_default"],
        "held-out log loss of the imputation models on four public data sets with missing predictors",
        False,
    ),
    "class_weights": (
        ["benchmarks.class_weights"],
        "held-out balanced error and log loss with class_weight='balanced' on unequal classes, against LogisticRegression",
        False,
    ),
    "cluster": (
        ["benchmarks.cluster"],
        "a random intercept with 10^5 levels on 10^7 rows of parquet, streamed on a 2-worker LocalCluster",
        False,
    ),
    "cluster_accurate": (
        ["benchmarks.cluster", "--small", "--accurate"],
        "the accurate fit of 2 x 10^5 rows, 2 x 10^4 levels out of core on a 2-worker LocalCluster, beside in memory",
        False,
    ),
    "cluster_impute": (
        ["benchmarks.cluster", "--impute"],
        "multiple imputation of a missing predictor, 2 x 10^5 rows, 2 x 10^4 levels out of core, beside in memory",
        False,
    ),
    "nested": (
        ["benchmarks.nested", "--dense"],
        "two nested random intercepts: the sums over nonzero columns against every column",
        False,
    ),
    "kernel": (["benchmarks.kernel"], "kernel fits against Wenzel et al. (2017) and scikit-learn", False),
    "kernel_oracle": (
        ["benchmarks.kernel_oracle", "--sets", "german", "breast_cancer", "titanic", "waveform", "--splits", "2"],
        "the kernel fit's log loss at the best fixed hyperparameters (chosen on the test rows) against GPC",
        False,
    ),
    "pcvm": (["benchmarks.pcvm"], "PCVM against SVC and the paper's tables", False),
    "loo_calibration": (
        ["benchmarks.loo_calibration"],
        "the probability map from PSIS leave-one-out against 5-fold cross-fitting",
        False,
    ),
}


def run(name: str) -> str:
    """The section of ``RESULTS.md`` for one benchmark."""
    arguments, purpose, _ = BENCHMARKS[name]
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", *arguments], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    status = "" if out.returncode == 0 else f" (FAILED with exit code {out.returncode})"
    body = out.stdout.strip("\n") or out.stderr.strip()[-2000:]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    return (
        f"## {name}: {purpose}\n\n`python -m {' '.join(arguments)}`: run {stamp}, {seconds:.0f} s{status}\n\n"
        f"```\n{body}\n```\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="also the long benchmarks")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), default=None)
    args = parser.parse_args(argv)
    names = args.only or [n for n, (_, _, quick) in BENCHMARKS.items() if quick or args.all]
    sections = {}
    if RESULTS.exists():  # keep the sections of benchmarks not run this time
        text = RESULTS.read_text(encoding="utf-8")
        for part in text.split("\n## ")[1:]:
            sections[part.split(":", 1)[0]] = "## " + part.rstrip("\n") + "\n"
    for name in names:
        print(f"running {name} ...", file=sys.stderr)
        sections[name] = run(name)
    header = (
        "# Benchmark results\n\n"
        f"Written by `python -m benchmarks.results` (Python {platform.python_version()}, {os.cpu_count()} cores); "
        "each section gives its command and the date it ran.  The README's performance numbers come from here.\n"
    )
    ordered = [sections[n] for n in BENCHMARKS if n in sections]
    RESULTS.write_text(header + "\n" + "\n".join(ordered), encoding="utf-8")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
