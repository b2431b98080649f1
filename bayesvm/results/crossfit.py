"""Cross-fitting: out-of-sample predictions of the training rows, for the calibration map.

:func:`bayesvm.bsvm` and :func:`bayesvm.pcvm` record how a fit was made (:class:`FitCall`: the formula, the
rows the fit used and the options).  :func:`cross_fitted_predictions` refits the same model on K - 1 of K
folds and lets each fold fit predict the rows it did not see, exactly as ``SVC(probability=True)`` does with
its internal folds; :mod:`bayesvm.results.calibration` learns the probability map from those predictions.

*Alignment.*  The map is learned on fold fits but applied to the full fit.  Where the posterior of ``f`` is near a
change of shape (a hinge fit that a dominant binary predictor squeezes into narrow bands at ``|f| ~ 1``), fits
on 80% of the rows can be squeezed less than the fit on all of them, and a map learned on their scale then
misreads the full fit's.  Each fold's out-of-fold decision values are therefore carried onto the full fit's
scale by matching quantiles, per side of the boundary, of the two fits' decision values on their own
training rows (:func:`align_decision_values`): the fold's ranking is kept, its scale becomes the full
fit's.  For a stable model the two sets of quantiles agree and the alignment is close to the identity.

Folds are stratified by class and drawn with the fit's seed (0 if it had none).  A fold fit is the same model
and engine with the checks' warnings silenced (the full fit already reported them) and, for Gibbs, at most
2 chains of 500 tuning and 500 kept draws: the map needs each row's posterior mean and variance of ``f``,
which those estimate to well within what a 3-parameter map can resolve.  For the accurate fit, a fold fit refits
the coefficients at the full fit's values of the variance parameters (its nodes holding 99.9% of the weight, with
their weights: :func:`variance_nodes`) instead of searching and weighting its own.

Where the full fit took a third of a second or more (:data:`FOLD_PROCESSES_FROM_SECONDS`), the fold fits run side by side in
worker processes, one per CPU (:func:`bayesvm.engines.workers.run_in_processes`, as the Gibbs chains do: they end
with the parent on Ctrl-C or SIGTERM), each with one BLAS thread; the folds' fits are the same either way.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..checks import Checks
from ..engines.progress import counter
from ..engines.workers import run_in_processes
from ..errors import BayesvmError


class CrossFitError(BayesvmError):
    """The data cannot be cross-fitted (too few rows of a class, or a fold's fit or prediction failed): the
    fit's probabilities fall back to the calibration prior's map, with a warning naming the cause."""


#: Where the fitting functions a :class:`FitCall` names live (``module:function``): a fit loaded in a process that
#: never imported the face still finds its refit; a file can only name a key of this table.
REFIT_FUNCTIONS = {"bsvm": "bayesvm.fitting:bsvm", "pcvm": "bayesvm.pcvm_fit:pcvm"}
#: The fitting functions resolved so far (the face registers its own as it is imported, so ``results/`` never
#: imports it at import time).
REFITTERS: dict[str, Callable[..., Any]] = {}


def register_refit(name: str, function: Callable[..., Any]) -> None:
    """Make ``function`` the refit of fits whose :class:`FitCall` names ``name``."""
    REFITTERS[name] = function


def refit_function(name: object) -> Callable[..., Any] | None:
    """The fitting function a :class:`FitCall` names, imported on first use (:data:`REFIT_FUNCTIONS`); ``None`` for a
    name that is not one."""
    if not isinstance(name, str) or name not in REFIT_FUNCTIONS:
        return None
    if name not in REFITTERS:
        module, function = REFIT_FUNCTIONS[name].split(":")
        REFITTERS[name] = getattr(importlib.import_module(module), function)
    return REFITTERS[name]


#: Folds of the default cross-fitting
DEFAULT_FOLDS = 5
#: The fold fits run in worker processes, side by side, where the full fit took at least this many seconds
#: (:func:`fold_processes`): starting the workers costs about a third of a second, so quicker fits run one by one
FOLD_PROCESSES_FROM_SECONDS = 0.3
#: Gibbs settings of a fold fit, at most
FOLD_GIBBS = {"chains": 2, "tune": 500, "draws": 500}
#: Quantiles matched by the alignment, and the fewest rows a side of the boundary needs for it
ALIGN_QUANTILES = np.linspace(0.005, 0.995, 199)
ALIGN_MIN_ROWS = 60
#: Bounds on the factor that carries a fold's variances onto the full fit's scale
ALIGN_SCALE_BOUNDS = (0.25, 4.0)


def align_decision_values(values: np.ndarray, source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Carry decision values from one fit's scale to another's by matching quantiles, per side of 0.

    Parameters
    ----------
    values
        Out-of-fold posterior means of ``f`` from a fold fit.
    source
        The fold fit's posterior means of ``f`` on its own training rows.
    target
        The full fit's posterior means of ``f`` on its training rows.

    Returns
    -------
    aligned, scale
        ``aligned``: on each side, ``|f|`` mapped through the fold's quantile function onto the full fit's
        (``Q_target(F_source(|f|))``, linear interpolation between 199 quantiles; proportional below the first,
        beyond the last continued with the ``scale`` below), with the sign kept, so no value changes side.  ``scale``: per value, the
        ratio of the two sides' interquartile ranges (within :data:`ALIGN_SCALE_BOUNDS`), by which the
        posterior SDs are carried over.  A side with fewer than :data:`ALIGN_MIN_ROWS` rows in either fit is
        left as it is (scale 1).
    """
    values = np.asarray(values, dtype=float)
    out, scale = values.copy(), np.ones(values.shape)
    for positive in (True, False):
        rows = (values > 0) == positive
        a = np.abs(source[(source > 0) == positive])
        b = np.abs(target[(target > 0) == positive])
        if not rows.any() or min(a.size, b.size) < ALIGN_MIN_ROWS:
            continue
        qa, first = np.unique(np.quantile(a, ALIGN_QUANTILES), return_index=True)
        qb = np.quantile(b, ALIGN_QUANTILES)[first]
        if qa.size < 2:
            continue
        spread_a = np.subtract(*np.quantile(a, [0.75, 0.25]))
        spread_b = np.subtract(*np.quantile(b, [0.75, 0.25]))
        ratio = float(np.clip(spread_b / spread_a if spread_a > 0 else 1.0, *ALIGN_SCALE_BOUNDS))
        x = np.abs(values[rows])
        mapped = np.interp(x, qa, qb)
        if qa[0] > 0:
            mapped = np.where(x < qa[0], x * (qb[0] / qa[0]), mapped)
        mapped = np.where(x > qa[-1], qb[-1] + ratio * (x - qa[-1]), mapped)
        # a value that underflows (a subnormal |f| times a ratio below 1) or meets a zero quantile keeps its side
        mapped = np.where(x > 0, np.maximum(mapped, np.nextafter(0.0, 1.0)), mapped)
        out[rows] = np.where(positive, mapped, -mapped)
        scale[rows] = ratio
    return out, scale


@dataclass
class FitCall:
    """How a fit was made: ``function`` (``"bsvm"`` or ``"pcvm"``), ``formula``, the training ``data`` (only the
    rows the fit used; ``None`` for out-of-core data) and the keyword ``options``."""

    function: str
    formula: str
    data: pd.DataFrame | None
    options: dict


def record_call(
    function: str, formula: str, data, options: dict, row_index: pd.Index | None, fixed: str = ""
) -> FitCall:
    """A :class:`FitCall` holding a copy of the rows and columns the fit used (the user's frame is never
    referenced)."""
    from ..formula.frames import as_frame
    from ..outofcore import is_dask_frame

    options = {k: v for k, v in options.items() if k not in ("formula", "data")}
    if is_dask_frame(data):  # lazy and immutable: kept by reference (and not saved: see BSVMFit.save)
        return FitCall(function, formula, data, options)
    frame = as_frame(data, "data")
    if row_index is not None and len(row_index) != len(frame):
        frame = frame[frame.index.isin(row_index)]
    kept = used_columns(frame.columns, f"{formula} {fixed}")  # ``fixed``: the fixed part with ``.`` expanded
    return FitCall(function, formula, frame[kept].copy(deep=True), options)


def used_columns(columns, formula: str) -> list:
    """The columns whose names appear in the formula as names (bare or back-quoted): what a refit needs."""
    return [c for c in columns if re.search(rf"(?<![\w.]){re.escape(str(c))}(?![\w.])", formula)]


def _fold_options(call: FitCall, fold: int, seed: int, imputed: tuple[str, ...] = (), spec=None, nodes=None) -> dict:
    options = dict(call.options)
    if nodes is not None:  # an accurate fit: the fold refits the coefficients at the full fit's variance parameters
        options["_fold_nodes"] = nodes
    if call.function == "bsvm":
        options["progress"] = False
        options["checks"] = Checks(**{name: "ignore" for name in Checks.__dataclass_fields__})
        if options.get("method") == "gibbs":
            for key, cap in FOLD_GIBBS.items():  # (``tune=None``: the engine's default, above the cap;
                given = options.get(key)  # ``draws="auto"``: as long as it takes, so the cap too)
                options[key] = cap if given is None or isinstance(given, str) else min(int(given), cap)
        options["seed"] = seed + fold
    elif options.get("method") == "em":
        options["seed"] = seed + fold
    if spec is not None or imputed:  # the full fit's columns and imputation variables (FoldDesign)
        from ..formula.design import FoldDesign

        options["_fold_design"] = FoldDesign(fixed_spec=spec, impute_also=tuple(imputed))
    return options


def stratified_folds(y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold number of every row: each class dealt round-robin over the folds after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    out = np.empty(y.size, dtype=int)
    start = 0
    for label in (1.0, -1.0):
        rows = rng.permutation(np.flatnonzero(y == label))
        out[rows] = (start + np.arange(rows.size)) % folds
        start += rows.size
    return out


def cross_fitted_predictions(fit, folds: int = DEFAULT_FOLDS, seed: int | None = None) -> pd.DataFrame:
    """Out-of-fold posterior moments of ``f`` for every training row of ``fit``.

    Returns
    -------
    DataFrame
        ``mean``, ``var`` (posterior of ``f`` under the fold fit, aligned onto the full fit's scale),
        ``new_var`` (``E[s]``, the variance a group level the fold never saw adds), ``y`` (+1/-1), ``fold`` and
        ``unaligned_mean``, one row per training row; ``attrs["alignment"]`` names the folds left unaligned
        (a fit that could not predict its own training rows), if any.

    Raises
    ------
    BayesvmError
        When the fit has no record of its data (out-of-core data, or a file from bayesvm 0.1) or a fold fit
        fails; the message names the fold and the cause.
    """
    call = getattr(fit, "call", None)
    if call is None or call.data is None:
        raise BayesvmError(
            "this fit keeps no copy of its training rows (out-of-core data, or a fit saved by an older bayesvm), "
            "so it cannot be cross-fitted: calibrate it on held-out rows with fit.calibrate(newdata=frame), "
            "or use predict(kind='pseudo') for the uncalibrated pseudo-likelihood"
        )
    function = refit_function(call.function)
    if function is None:
        raise BayesvmError(f"the fit was made by {call.function!r}, which is not a known fitting function")
    base = call.options.get("seed")
    base = 0 if not isinstance(base, (int, np.integer)) else int(base)
    if not isinstance(call.data, pd.DataFrame):
        return _cross_fit_streamed(fit, function, folds, base if seed is None else seed)
    y = np.asarray(fit.model.design.y, dtype=float)
    data = call.data
    if len(data) != y.size:
        raise BayesvmError(f"the fit's record holds {len(data)} rows but the fit used {y.size}: cannot cross-fit")
    counts = min(int(np.sum(y > 0)), int(np.sum(y < 0)))
    folds = int(min(folds, counts))
    if folds < 2:
        raise CrossFitError(f"cross-fitting needs at least 2 rows of each class; the smaller class has {counts}")
    base = base if seed is None else seed
    fold_of = stratified_folds(y, folds, base)
    out = pd.DataFrame({"mean": 0.0, "var": 0.0, "new_var": 0.0, "y": y, "fold": fold_of, "unaligned_mean": 0.0})
    target = _training_decision_values(fit, data)
    layout = getattr(getattr(fit.model, "design", None), "imputation", None)
    imputed = (
        tuple(dict.fromkeys(layout.source_columns))
        if layout is not None and call.options.get("missing") == "impute"
        else ()
    )
    spec = getattr(getattr(getattr(fit, "model", None), "design", None), "spec", None)
    cores = fold_processes(fit, folds)
    nodes = variance_nodes(fit) if call.function == "bsvm" else None
    jobs = []
    for k in range(folds):
        options = _fold_options(call, k, base, imputed, spec, nodes)
        if cores > 1 and call.function == "bsvm":
            options["cores"] = 1  # (a worker process may not start chain processes of its own)
        job = (function, call.formula, data, fold_of == k, options, k, folds, target is not None, cores > 1)
        jobs.append((_fold_moments, job))
    show = _shows_progress(call.options)
    with counter(show, "probability calibration: cross-fitting", "folds", total=folds) as tick:
        if cores > 1:
            done = None if tick is None else (lambda index: tick())
            moments = run_in_processes(jobs, cores, "cross-fitting fold fit", on_result=done)
        else:
            moments = []
            for job, args in jobs:
                moments.append(job(*args))
                if tick is not None:
                    tick()
    unaligned: list[int] = []
    for k, (mean, var, new_var, source) in enumerate(moments):
        held = fold_of == k
        out.loc[held, "unaligned_mean"] = mean
        if source is not None:
            mean, factor = align_decision_values(mean, source, target)
            var, new_var = var * factor**2, new_var * factor**2
        else:
            unaligned.append(k + 1)
        out.loc[held, "mean"], out.loc[held, "var"], out.loc[held, "new_var"] = mean, var, new_var
    if unaligned:  # said in the map's description (CalibrationMap.describe)
        whose = "the full fit" if target is None else f"the fit on folds other than {unaligned}"
        out.attrs["alignment"] = (
            f"fold(s) {unaligned} not carried onto the full fit's scale: {whose} could not predict its own training rows"
        )
    return out


def variance_nodes(fit):
    """The values of the variance parameters an accurate fit's folds are fitted at: the full fit's heaviest nodes
    (:func:`bayesvm.engines.hyper_grid.heaviest_nodes`, 99.9% of the weight; for a fit that integrated the
    learned penalty from the slopes, the other parameters' values with the penalty at its fitted value,
    :func:`bayesvm.engines.linear.penalty_from_slopes.given_at_fitted_penalty`), or None for other fits.

    The variance parameters are learned once, from every row; each fold refits the coefficients on its own rows at
    them.  Searching and weighting a fold's own nodes costs several times the EP fits at these, for a posterior of
    a few variance parameters that four fifths of the rows barely move."""
    from ..engines.hyper_grid import heaviest_nodes
    from ..engines.linear.penalty_from_slopes import given_at_fitted_penalty

    result = getattr(fit, "result", None)
    if not getattr(fit.posterior, "over_nodes", False) or not getattr(result, "has_component", False):
        return None
    if getattr(result, "penalty_from_slopes", None) is not None:
        return given_at_fitted_penalty(result, heaviest_nodes(result))
    return heaviest_nodes(result)


def _shows_progress(options: dict) -> bool:
    """Whether the fit's call asked for progress bars (``progress=`` or ``control=Control(progress=...)``; the default
    shows them)."""
    if "progress" in options:
        return options["progress"] is not False
    return getattr(options.get("control"), "progress", True) is not False


def fold_processes(fit, folds: int) -> int:
    """Worker processes for the fold fits: one per fold up to the CPUs (:func:`bayesvm.arguments.default_cores`; 1
    where processes would be spawned or inside a worker) where the full fit took at least
    :data:`FOLD_PROCESSES_FROM_SECONDS`, else 1 (a process costs more than a quick fit).  The folds' fits do not
    depend on it."""
    from ..arguments import default_cores

    elapsed = getattr(getattr(fit, "result", None), "elapsed", None)
    if not isinstance(elapsed, (int, float)) or elapsed < FOLD_PROCESSES_FROM_SECONDS:
        return 1
    return default_cores(folds)


def _fold_moments(function, formula, data, held, options, k, folds, aligned, single_thread):
    """Fold ``k``'s fit on the rows not ``held`` and its posterior moments of ``f`` on the ``held`` rows: ``(mean,
    var, new_var, source)``, ``source`` its means on its own training rows (None unless ``aligned``, or where it cannot
    predict them); the fit's errors as :func:`_fold_failure`.  ``single_thread``: BLAS runs one thread (the folds'
    worker processes share the CPUs)."""
    from threadpoolctl import threadpool_limits

    train, test = data.iloc[np.flatnonzero(~held)], data.iloc[np.flatnonzero(held)]
    try:
        with warnings.catch_warnings(), threadpool_limits(limits=1) if single_thread else nullcontext():
            warnings.simplefilter("ignore")
            fold_fit = function(formula, train, **options)
            mean, var, new_var = fold_fit.link_moments(test)
            source = _training_decision_values(fold_fit, train) if aligned else None
    except (ValueError, ArithmeticError) as exc:  # a fit's own errors, and a numerical failure (LinAlgError)
        raise _fold_failure(k, folds, exc) from None
    return np.asarray(mean, dtype=float), np.asarray(var, dtype=float), np.asarray(new_var, dtype=float), source


def _fold_failure(k: int, folds: int, exc: Exception) -> CrossFitError:
    """The error that names fold ``k``'s failed fit or prediction and its cause (the fit's :meth:`calibrate` turns it
    into one warning and the prior's map)."""
    cause = str(exc) if isinstance(exc, BayesvmError) else f"{type(exc).__name__}: {exc}"
    return CrossFitError(
        f"cross-fitting for the probability calibration: the fit on folds other than {k + 1} of {folds} failed ({cause})"
    )


def _training_decision_values(fit, rows: pd.DataFrame) -> np.ndarray | None:
    """A fit's posterior means of ``f`` on its own training rows (``None`` where it cannot predict them): the means
    alone, without the rows' variances."""
    try:
        return fit.predict(rows, kind="link").to_numpy(dtype=float)
    except BayesvmError:
        return None


def _with_fold(part: pd.DataFrame, folds: int, seed: int, partition_info=None) -> pd.DataFrame:
    number = 0 if partition_info is None else int(partition_info["number"])
    rng = np.random.default_rng([seed, number])
    return part.assign(**{FOLD_COLUMN: rng.integers(0, folds, len(part))})


#: Column holding the fold of an out-of-core row while cross-fitting
FOLD_COLUMN = "__bayesvm_fold__"


def _cross_fit_streamed(fit, function, folds: int, seed: int) -> pd.DataFrame:
    """Cross-fitting of out-of-core data: every row gets a seeded random fold (per partition); each fold fit
    streams the other folds, and the held-out fold is predicted one partition at a time."""
    call = fit.call
    data = call.data.map_partitions(_with_fold, folds, seed, meta={**call.data.dtypes.to_dict(), FOLD_COLUMN: "i8"})
    nodes = variance_nodes(fit) if call.function == "bsvm" else None
    parts = []
    for k in range(folds):
        train = data[data[FOLD_COLUMN] != k].drop(columns=FOLD_COLUMN)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                fold_fit = function(call.formula, train, **_fold_options(call, k, seed, nodes=nodes))
            except (ValueError, ArithmeticError) as exc:
                raise _fold_failure(k, folds, exc) from None
        held_data = data[data[FOLD_COLUMN] == k].drop(columns=FOLD_COLUMN)
        for i in range(held_data.npartitions):
            held = held_data.partitions[i].compute()
            if call.options.get("missing") == "drop":
                held = held.dropna(subset=used_columns(held.columns, call.formula))
            elif call.options.get("missing") == "impute":  # (the response is never imputed: as the fit, drop those)
                held = held.dropna(subset=[fit.model.design.parsed.response])
            if not len(held):
                continue
            try:
                mean, var, new_var = fold_fit.link_moments(held)
            except (ValueError, ArithmeticError) as exc:  # e.g. a level only this fold's rows have
                raise _fold_failure(k, folds, exc) from None
            y = fit.model.design.response_of(held)
            parts.append(pd.DataFrame({"mean": mean, "var": var, "new_var": new_var, "y": y, "fold": k}))
    return pd.concat(parts, ignore_index=True)
