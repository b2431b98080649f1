"""Command line: ``python -m bayesvm {example,fit,predict,summary,docs} ...`` (also installed as ``bayesvm``).

Exit codes: 0 success; 1 an internal error (a bug: rerun with ``--debug``); 2 a usage or input error (the
message names the option, column or file); 3 the fit ran but did not converge (the summary says why).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings

EXIT_OK, EXIT_BUG, EXIT_INPUT, EXIT_NOT_CONVERGED = 0, 1, 2, 3

EXAMPLES = {
    "toenail": (
        "Luts & Ormerod (2014), section 4.3: random-intercept Bayesian SVM for the toenail trial",
        "outcome ~ visit * treatment + (1 | patientID)",
    ),
}

PRIORS = {"laplace-zero": "LaplaceZero", "spike-slab": "SpikeSlab", "lasso": "Lasso"}
KERNELS = {"rbf": "RBF", "matern52": "Matern52", "linear": "Linear"}
OUTPUTS = ("text", "csv", "json")
PREDICT_KINDS = ("class", "prob", "pseudo", "link")

EPILOG = (
    "exit codes: 0 success; 1 internal error (rerun with --debug); 2 usage or input error; "
    "3 the fit ran but did not converge"
)


def _class_weight(text: str) -> str | dict:
    """``balanced``, or ``CLASS=WEIGHT`` pairs separated by commas (classes as text, as bsvm matches them)."""
    if text == "balanced":
        return text
    weights = {}
    for pair in text.split(","):
        label, sep, value = pair.partition("=")
        if not sep or not label.strip():
            raise argparse.ArgumentTypeError(f"must be 'balanced' or CLASS=WEIGHT[,CLASS=WEIGHT], got {text!r}")
        weights[label.strip()] = value.strip()
    return weights


def _penalty(text: str) -> float | str | None:
    if text == "learn":
        return "learn"
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'learn', 'none' or a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be 'learn', 'none' or a number > 0, got {text!r}")
    return value


def _draws(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of draws or 'auto', got {text!r}") from None


def _inducing(text: str) -> int | str:
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of inducing points or 'all', got {text!r}") from None


def _add_output(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--output", default="text", choices=OUTPUTS, help=f"{what} as text (default), CSV or JSON on standard output"
    )


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error in one line (what is wrong and where the help is), exit code 2."""

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m bayesvm", description="Bayesian support vector machines.", epilog=EPILOG)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    anywhere = argparse.ArgumentParser(add_help=False)  # --debug after the sub-command too
    anywhere.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    original = sub.add_parser
    sub.add_parser = lambda *args, **kwargs: original(*args, parents=[anywhere], **kwargs)

    example = sub.add_parser("example", help="run a worked example from the papers", epilog=EPILOG)
    example.add_argument("name", choices=sorted(EXAMPLES))

    fit = sub.add_parser("fit", help="fit a formula to a CSV file and print the summary", epilog=EPILOG)
    fit.add_argument("formula", help='e.g. "y ~ x1 * x2 + (1 | group)" or "y ~ ." (every other column)')
    fit.add_argument("csv", help="path to a CSV file with a header row")
    fit.add_argument("--encoding", default=None, help="the CSV file's text encoding (default: UTF-8, else Latin-1)")
    model = fit.add_argument_group("model")
    model.add_argument("--penalty", default="learn", type=_penalty, help="'learn' (default), 'none' or alpha > 0")
    model.add_argument("--positive", default=None, help="response value to code as +1 (the positive class)")
    model.add_argument("--prior", default=None, choices=sorted(PRIORS), help="a variable-selection prior on the slopes")
    model.add_argument("--rho", type=float, default=None, help="laplace-zero: prior inclusion probability")
    model.add_argument("--pi", type=float, default=None, help="spike-slab: prior inclusion probability")
    model.add_argument("--unpenalized", nargs="+", default=None, metavar="TERM", help="slopes the prior leaves alone")
    model.add_argument("--kernel", default=None, choices=sorted(KERNELS), help="a nonlinear (kernel) fit")
    model.add_argument("--lengthscale", type=float, default=None, help="kernel lengthscale (default: learned)")
    model.add_argument("--inducing", type=_inducing, default=None, help="kernel: number of inducing points or 'all'")
    model.add_argument("--missing", default="error", choices=["error", "drop", "impute"])
    model.add_argument(
        "--imputation", default="auto", choices=["auto", "mi", "joint"], help="with --missing impute (as bsvm's)"
    )
    model.add_argument(
        "--class-weight",
        type=_class_weight,
        default=None,
        metavar="WEIGHTS",
        help="weigh each row's hinge loss by its class: 'balanced' or CLASS=WEIGHT[,CLASS=WEIGHT]",
    )
    model.add_argument("--imputations", type=int, default=20, help="completed data sets (--imputation mi)")
    model.add_argument("--no-standardize", action="store_true", help="fit on the columns as given")
    model.add_argument(
        "--paper-penalty-prior",
        action="store_true",
        help="the paper's IG(0.01, 0.01) on the learned penalty's variance even where the classes are separated "
        "(by default a half-t(3, 2.5) on its SD there)",
    )
    engine = fit.add_argument_group("engine")
    engine.add_argument(
        "--method",
        default="vb",
        help="the engine: vb, gibbs, em or svi (any method of the engines' table; bsvm() checks it)",
    )
    engine.add_argument(
        "--vb",
        default=None,
        choices=["meanfield", "accurate"],
        help="variational fit (default: accurate where it applies)",
    )
    engine.add_argument(
        "--draws", type=_draws, default=1000, help="Gibbs draws per chain, or 'auto' (until R-hat <= 1.01, ESS >= 400)"
    )
    engine.add_argument(
        "--tune", type=int, default=None, help="Gibbs tuning iterations (default 1000; 2000 with a selection prior)"
    )
    engine.add_argument("--chains", type=int, default=4, help="Gibbs chains")
    engine.add_argument("--thin", type=int, default=1, help="keep every THIN-th Gibbs draw")
    engine.add_argument(
        "--cores",
        type=int,
        default=None,
        help="processes for the Gibbs chains (default: one per chain, up to the CPUs)",
    )
    engine.add_argument("--seed", type=int, default=None, help="random seed (Gibbs, probes, SVI, inducing points)")
    engine.add_argument("--tol", type=float, default=None, help="convergence tolerance (VB, EM)")
    engine.add_argument("--max-iter", type=int, default=None, help="iteration cap (VB, EM, SVI)")
    engine.add_argument("--batch-size", type=int, default=100, help="SVI minibatch rows")
    engine.add_argument(
        "--probes", type=int, default=None, help="mean-field VB with this many variance probes (huge crossed factors)"
    )
    engine.add_argument("--progress", action="store_true", help="show a progress bar on standard error")
    out = fit.add_argument_group("output")
    _add_output(out, "the summary (text) or the coefficient table")
    out.add_argument(
        "--save", default=None, metavar="PATH", help="write the fit to PATH (read it with predict/summary)"
    )

    predict = sub.add_parser("predict", help="predict a CSV file from a saved fit", epilog=EPILOG)
    predict.add_argument("fit", help="a file written by fit --save")
    predict.add_argument("csv", help="rows to predict (a CSV file with the model's columns)")
    predict.add_argument("--encoding", default=None)
    predict.add_argument("--kind", default="prob", choices=PREDICT_KINDS, help="what to predict (default: prob)")
    predict.add_argument("--interval", action="store_true", help="also the posterior mean, SD and interval of f")
    predict.add_argument("--new-levels", default="integrate", choices=["integrate", "zero"], help="unseen group levels")
    _add_output(predict, "the predictions")

    summary = sub.add_parser("summary", help="print the summary of a saved fit", epilog=EPILOG)
    summary.add_argument("fit", help="a file written by fit --save")
    summary.add_argument("--level", type=float, default=0.95, help="credible interval level")
    _add_output(summary, "the summary (text) or the coefficient table")

    docs = sub.add_parser("docs", help="list the vignettes, or print one", epilog=EPILOG)
    docs.add_argument("name", nargs="?", default=None)
    docs.add_argument("--path", action="store_true", help="print the file's path instead of its text")
    return parser


def read_csv(path: str, encoding: str | None = None):
    """A CSV file as a frame; every way the file can be unreadable becomes one :class:`DataError` line.

    Without ``encoding``, UTF-8 is tried first and Latin-1 second (with a note on standard error).
    """
    import pandas as pd

    from .errors import DataError

    try:
        try:
            return pd.read_csv(path, encoding=encoding or "utf-8")
        except UnicodeDecodeError:
            if encoding is not None:
                raise
        print(f"note: {path} is not UTF-8 text; read it as Latin-1 (use --encoding to choose)", file=sys.stderr)
        return pd.read_csv(path, encoding="latin-1")
    except FileNotFoundError:
        raise DataError(f"no such file: {path}") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty: a CSV file with a header row is needed") from None
    except (pd.errors.ParserError, UnicodeDecodeError, LookupError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot read {path} as CSV: {first}") from None


#: Python keyword hints in messages (``missing='drop'``) that have a command-line spelling.
CLI_OPTIONS = {
    "missing", "method", "vb", "penalty", "positive", "prior", "kernel", "draws", "tune", "chains", "thin", "cores",
    "seed", "tol", "max_iter", "probes", "imputation", "imputations", "inducing", "unpenalized", "standardize",
    "class_weight",
}  # fmt: skip
HINT = re.compile(r"(?<![\w.]\()\b([a-z_]+)=('([^']*)'|\"([^\"]*)\"|[0-9][0-9.e+-]*|True|False|None)")
PRIOR_HINT = re.compile(r"prior=(LaplaceZero|SpikeSlab|Lasso)\([^)]*\)")
#: The Python spelling of keeping the paper's priors, and its command-line flag.
PAPER_PRIORS_HINT = ("bsvm(..., priors=bayesvm.priors.PriorSet())", "--paper-penalty-prior")


def command_line_hints(message: str) -> str:
    """``missing='drop'`` -> ``--missing drop`` (and the priors' spellings), for messages shown on the command line."""
    names = {v: k for k, v in PRIORS.items()}
    message = PRIOR_HINT.sub(lambda m: f"--prior {names[m.group(1)]}", message).replace(*PAPER_PRIORS_HINT)

    def swap(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        if name not in CLI_OPTIONS:
            return match.group(0)
        value = (
            match.group(3) if match.group(3) is not None else match.group(4) if match.group(4) is not None else value
        )
        flag = "--" + name.replace("_", "-")
        if name == "standardize" and value == "False":
            return "--no-standardize"
        return f"{flag} {value}"

    return HINT.sub(swap, message)


def _fit_options(args) -> dict:
    from . import kernels, priors

    options = dict(
        method=args.method,
        penalty=args.penalty,
        positive=args.positive,
        missing=args.missing,
        standardize=not args.no_standardize,
        vb=args.vb,
        draws=args.draws,
        tune=args.tune,
        chains=args.chains,
        thin=args.thin,
        cores=args.cores,
        seed=args.seed,
        tol=args.tol,
        max_iter=args.max_iter,
        batch_size=args.batch_size,
        probes=args.probes,
        progress=args.progress,
        imputation=args.imputation,
        imputations=args.imputations,
        class_weight=args.class_weight,
        unpenalized=args.unpenalized,
        inducing=args.inducing,
    )
    if args.paper_penalty_prior:  # (EM's default is the paper's throughout already)
        options["priors"] = priors.PriorSet.paper() if args.method == "em" else priors.PriorSet()
    if args.prior is not None:
        settings = {}
        if args.rho is not None:
            settings["rho"] = args.rho
        if args.pi is not None:
            settings["pi"] = args.pi
        options["prior"] = getattr(priors, PRIORS[args.prior])(**settings)
    elif args.rho is not None or args.pi is not None:
        raise _usage("--rho and --pi need --prior laplace-zero or --prior spike-slab")
    if args.kernel is not None:
        settings = {"lengthscale": args.lengthscale} if args.lengthscale is not None else {}
        if settings and args.kernel == "linear":
            raise _usage("--lengthscale applies to --kernel rbf or matern52, not linear")
        options["kernel"] = getattr(kernels, KERNELS[args.kernel])(**settings)
    elif args.lengthscale is not None or args.inducing is not None:
        raise _usage("--lengthscale and --inducing need --kernel")
    return options


def _usage(message: str):
    from .errors import BayesvmError

    return BayesvmError(message)


def _tables(fit, level: float = 0.95):
    return fit.summary(level=level).tidy()


def _write(frame, output: str) -> None:
    if output == "csv":
        frame.to_csv(sys.stdout, index=False)
    else:
        sys.stdout.write(frame.to_json(orient="records", indent=1, double_precision=10) + "\n")


def _example(name: str) -> int:
    from . import datasets
    from .fitting import bsvm

    title, formula = EXAMPLES[name]
    data = datasets.load_toenail()
    print(title, end="\n\n")
    print("== 1. The default fit (accurate VB) ==\n")
    fit = bsvm(formula, data, progress=False)
    print(command_line_hints(str(fit.summary())), end="\n\n")
    with warnings.catch_warnings(record=True) as caught:  # this fit's warnings belong under its own heading
        warnings.simplefilter("always")
        meanfield = bsvm(formula, data, progress=False, vb="meanfield")
    bound = meanfield.lower_bound
    steps = bound[1:] - bound[:-1]
    monotone = bool(steps.min() >= -1e-8 * abs(bound[-1])) if steps.size else True
    print("== 2. The paper's mean-field VB (Algorithm 2) on the same model, for comparison ==\n")
    for warning in caught:
        print(f"  its {warning.category.__name__}: {command_line_hints(str(warning.message))}")
    print(
        f"  lower bound on log p(y): {bound[0]:.2f} after sweep 1 -> {bound[-1]:.2f} after sweep {bound.size}; "
        f"{'never decreased' if monotone else 'DECREASED (a bug)'}; "
        f"{'converged' if meanfield.converged else 'NOT converged'} (plot it with bayesvm.plots.plot_lower_bound)"
    )
    evidence = fit.result.log_evidence
    print(
        f"  the accurate fit's log evidence is {evidence:.2f}: the bound lies {evidence - bound[-1]:.0f} below it, the "
        "price of\n  mean-field's factorised q (it treats the coefficients, the augmentation variables and the "
        "variances as independent)"
    )
    import numpy as np

    sd_accurate = np.sqrt(np.diag(fit.fixef_cov.to_numpy()))
    sd_meanfield = np.sqrt(np.diag(meanfield.fixef_cov.to_numpy()))
    ratio = sd_meanfield / sd_accurate
    variance = {est.group: est.mean[0, 0] for est in fit.variance_components if est.group != "penalty"}
    variance_mf = {est.group: est.mean[0, 0] for est in meanfield.variance_components if est.group != "penalty"}
    print(
        f"  so its posterior SDs are {ratio.min():.2f}-{ratio.max():.2f} times the accurate fit's and the patient "
        f"variance {variance_mf['patientID']:.2f} against {variance['patientID']:.2f}:"
        "\n  use the default (accurate) fit; mean-field VB is kept for the paper's algorithm and its lower bound."
    )
    return EXIT_OK


def _fit(args) -> int:
    from .fitting import bsvm

    data = read_csv(args.csv, args.encoding)
    data.attrs["name"] = args.csv
    data.attrs["rows"] = len(data)
    fit = bsvm(args.formula, data, **_fit_options(args))
    if args.save:
        fit.calibration_map()  # learned now, saved with the fit: predict from the file needs no refits
        fit.save(args.save)
        print(f"saved the fit to {args.save}", file=sys.stderr)
    _show_fit(fit, args.output)
    return EXIT_OK if fit.converged else EXIT_NOT_CONVERGED


def _show_fit(fit, output: str, level: float = 0.95) -> None:
    if output == "text":
        print(command_line_hints(str(fit.summary(level=level))))
    else:
        _write(_tables(fit, level), output)


def _load(path: str):
    from .results.storage import load_fit

    return load_fit(path)


def _predict(args) -> int:
    import pandas as pd

    fit = _load(args.fit)
    data = read_csv(args.csv, args.encoding)
    predicted = fit.predict(data, kind=args.kind, new_levels=args.new_levels)
    frame = predicted.to_frame()
    if args.kind in ("prob", "pseudo"):  # the column says which class it is the probability of
        coding = fit.model.design.response
        frame.columns = [f"{args.kind}_{coding.name}={coding.positive}"]
    if args.interval:
        frame = frame.join(fit.predict_interval(data, new_levels=args.new_levels))
    frame.index.name = "row"
    frame = frame.reset_index()
    if args.output == "text":
        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(frame.to_string(index=False))
    else:
        _write(frame, args.output)
    return EXIT_OK


def _summary(args) -> int:
    fit = _load(args.fit)
    _show_fit(fit, args.output, args.level)
    return EXIT_OK


def _docs(args) -> int:
    from . import docs

    if args.name is None:
        for name, heading in docs.topics().items():
            print(f"{name:<16} {heading}")
        print("\npython -m bayesvm docs NAME prints one (Markdown; --path gives its file)")
        return EXIT_OK
    print(docs.path(args.name) if args.path else docs.text(args.name))
    return EXIT_OK


COMMANDS = {"example": lambda args: _example(args.name), "fit": _fit, "predict": _predict, "summary": _summary,
            "docs": _docs}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (see the module docstring)."""
    args = _parser().parse_args(argv)
    from .errors import BayesvmError

    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = f"warning: {category.__name__}: {command_line_hints(str(message))}"
        if text not in seen:  # each warning once, however often it was raised
            seen.add(text)
            print(text, file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            return COMMANDS[args.command](args)
        except BrokenPipeError:  # the reader went away (``... | head``): stop quietly, as other tools do
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
        except (BayesvmError, OSError) as exc:
            if args.debug:
                raise
            print(f"error: {command_line_hints(str(exc))}", file=sys.stderr)
            return EXIT_INPUT
        except Exception as exc:  # noqa: BLE001 - a bug, not an input error: one line, the traceback on --debug
            if args.debug:
                raise
            print(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
            return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
