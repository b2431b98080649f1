"""Command line: ``python -m bayesvm example toenail`` and ``python -m bayesvm fit FORMULA data.csv``."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from . import datasets
from .errors import BayesvmError, DataError
from .fitting import METHODS, bsvm

EXAMPLES = {
    "toenail": (
        "Luts & Ormerod (2014), section 4.3: random-intercept Bayesian SVM for the toenail trial",
        datasets.load_toenail,
        "outcome ~ visit * treatment + (1 | patientID)",
        {"penalty": None},
    ),
}


def _penalty(text: str) -> float | str | None:
    if text == "learn":
        return "learn"
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"penalty must be 'learn', 'none' or a number, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bayesvm", description="Bayesian support vector machines.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    example = sub.add_parser("example", help="run a worked example from the papers")
    example.add_argument("name", choices=sorted(EXAMPLES))
    fit = sub.add_parser("fit", help="fit a formula to a CSV file and print the summary")
    fit.add_argument("formula", help='e.g. "y ~ x1 * x2 + (1 | group)"')
    fit.add_argument("csv", help="path to a CSV file with a header row")
    fit.add_argument("--encoding", default=None, help="the CSV file's text encoding (default: UTF-8, else Latin-1)")
    fit.add_argument("--method", default="vb", choices=METHODS)
    fit.add_argument("--penalty", default="learn", type=_penalty, help="'learn' (default), 'none' or alpha > 0")
    fit.add_argument("--positive", default=None, help="response value to code as +1")
    fit.add_argument("--missing", default="error", choices=["error", "drop"])
    fit.add_argument("--no-standardize", action="store_true", help="fit on the columns as given")
    fit.add_argument(
        "--vb",
        default=None,
        choices=["meanfield", "accurate"],
        help="variational fit (method vb; default: accurate where it applies)",
    )
    fit.add_argument("--draws", type=int, default=1000, help="Gibbs draws per chain")
    fit.add_argument("--tune", type=int, default=1000, help="Gibbs tuning iterations")
    fit.add_argument("--chains", type=int, default=4, help="Gibbs chains")
    fit.add_argument(
        "--probes",
        type=int,
        default=None,
        help="mean-field VB with this many variance probes (crossed factors with thousands of levels)",
    )
    fit.add_argument("--seed", type=int, default=None, help="Gibbs seed (and the probes')")
    return parser


def read_csv(path: str, encoding: str | None = None) -> pd.DataFrame:
    """A CSV file as a frame; every way the file can be unreadable becomes one :class:`DataError` line.

    Without ``encoding``, UTF-8 is tried first and Latin-1 second (with a note on standard error).
    """
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "example":
            title, loader, formula, kwargs = EXAMPLES[args.name]
            print(title, end="\n\n")
            fit = bsvm(formula, loader(), **kwargs)
        else:
            data = read_csv(args.csv, args.encoding)
            data.attrs["name"] = args.csv
            fit = bsvm(
                args.formula,
                data,
                method=args.method,
                penalty=args.penalty,
                positive=args.positive,
                missing=args.missing,
                standardize=not args.no_standardize,
                vb=args.vb,
                draws=args.draws,
                tune=args.tune,
                chains=args.chains,
                seed=args.seed,
                probes=args.probes,
            )
    except (BayesvmError, OSError) as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug, not an input error: one line, the traceback on --debug
        if args.debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        return 1
    print(fit.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
