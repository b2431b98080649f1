"""Import time: ``python -m benchmarks.import_time [--repeats 5]``.

Each statement runs in a fresh interpreter (``python -X importtime``; best of ``--repeats``), next to the
peers a user imports anyway, in the same run:

* ``import bayesvm``: the package face; the public names load on first use (PEP 562), so this is the
  cost of the errors module alone (goal: under 0.6 s);
* ``from bayesvm import bsvm``: what the first fit pays (pandas, formulaic, scipy, the engines);
* ``import pandas`` and ``import sklearn.svm``: the floor and a peer.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

STATEMENTS = {
    "import bayesvm": ("import bayesvm", "bayesvm"),
    "from bayesvm import bsvm": ("import bayesvm.fitting", "bayesvm.fitting"),
    "import pandas (floor)": ("import pandas", "pandas"),
    "import sklearn.svm (peer)": ("import sklearn.svm", "sklearn.svm"),
}
GOAL_SECONDS = 0.6


def cumulative_seconds(statement: str, module: str) -> float:
    """The cumulative import time of ``module`` reported by ``-X importtime`` for ``statement``."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True)
    if out.returncode != 0:
        return float("nan")
    for line in reversed(out.stderr.splitlines()):
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
        if match and match.group(2) == module:
            return int(match.group(1)) / 1e6
    return float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    results = {
        name: min(cumulative_seconds(statement, module) for _ in range(args.repeats))
        for name, (statement, module) in STATEMENTS.items()
    }
    pandas = results["import pandas (floor)"]
    print(f"{'statement':<28} {'seconds':>8} {'x pandas':>9}")
    for name, seconds in results.items():
        print(f"{name:<28} {seconds:>8.3f} {seconds / pandas:>9.2f}")
    verdict = "met" if results["import bayesvm"] < GOAL_SECONDS else "NOT met"
    print(f"goal: import bayesvm under {GOAL_SECONDS} s: {verdict}")


if __name__ == "__main__":
    main()
