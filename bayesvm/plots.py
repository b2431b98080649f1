"""Plots of a fit (matplotlib; ``pip install "bayesvm[plot]"``).  Each returns the Axes it drew on."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import BayesvmError


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError('bayesvm.plots needs matplotlib: pip install "bayesvm[plot]"') from None
    return plt


def _axes(ax):
    if ax is None:
        _, ax = _pyplot().subplots()
    return ax


def _no_lower_bound(fit) -> str:
    """Why a fit has no lower-bound trace, and which fit has one."""
    kind = getattr(getattr(fit, "posterior", None), "kind", "")
    if fit.result.fits is not None:
        return (
            "a multiple-imputation fit has one lower bound per completed data set, not one for the pooled "
            "posterior: plot fit.result.fits[k].lower_bound"
        )
    if kind == "mixture":
        what = "the accurate fit (EP integrated over the variance parameters) has no lower bound to trace"
    elif kind == "sampled":
        what = "a Gibbs fit has draws, not a lower bound (its trace plots are in fit.to_inference_data())"
    elif kind == "mode":
        what = "an EM fit climbs a log posterior, not a lower bound (fit.objective)"
    else:
        what = "this fit records no lower bound"
    return (
        f"{what}; the mean-field VB fit of the same model traces one: "
        "bsvm(..., vb='meanfield') (see fit.summary() for what the default fit reports instead)"
    )


def plot_lower_bound(fit, ax=None):
    """The VB lower bound ``log p(y; q)`` after every sweep (mean-field VB fits)."""
    if fit.lower_bound.size == 0:
        raise BayesvmError(_no_lower_bound(fit))
    ax = _axes(ax)
    sweeps = np.arange(1, fit.lower_bound.size + 1)
    ax.plot(sweeps, fit.lower_bound, marker=".")
    ax.set_xlabel("sweep")
    ax.set_ylabel("lower bound on log p(y)")
    state = f"converged after {fit.n_iter} sweeps" if fit.converged else "NOT converged"
    ax.set_title(f"Mean-field VB lower bound: {state}")
    return ax


#: Inches of figure height per coefficient row in a forest plot (and the least height).
ROW_INCHES, MIN_INCHES = 0.22, 3.0


def plot_coefficients(
    fit,
    level: float = 0.95,
    intercept: bool = True,
    sort: bool = False,
    standardize: bool = False,
    ax=None,
):
    """Forest plot: posterior mean and central credible interval of each fixed effect.

    Parameters
    ----------
    level
        Credible level of the intervals.
    intercept
        Include the intercept (``False`` leaves it out, e.g. when its scale dwarfs the slopes').
    sort
        Order the rows by the posterior mean (largest at the top) instead of formula order.
    standardize
        Show each slope times its column's standard deviation: the change in the decision value ``f``
        per standard deviation of the predictor, so that predictors on different scales compare.
    ax
        Axes to draw on; by default a new figure whose height grows with the number of rows, so that
        60 or more labels stay readable.
    """
    table = fit.summary(level=level).fixed
    if not intercept:
        table = table.drop(index="(Intercept)", errors="ignore")
    if table.empty:
        raise BayesvmError("the model has no fixed effects besides the intercept to plot")
    has_interval = table.shape[1] >= 4 and fit.method != "em"
    columns = ["mean"] + (list(table.columns[2:4]) if has_interval else [])
    table = table[columns].copy()
    if standardize:
        design = fit.model.design
        sd = pd.Series(np.asarray(design.X, dtype=float).std(axis=0), index=list(design.x_names))
        scale = sd.reindex(table.index).where(lambda s: s > 0, 1.0).fillna(1.0)
        table = table.mul(scale, axis=0)
    if sort:
        table = table.sort_values("mean")
    else:
        table = table.iloc[::-1]  # formula order from the top
    if ax is None:
        plt = _pyplot()
        _, ax = plt.subplots(figsize=(6.4, max(MIN_INCHES, ROW_INCHES * len(table) + 1.2)), layout="constrained")
    rows = np.arange(len(table))
    if has_interval:
        ax.hlines(rows, table[columns[1]], table[columns[2]], color="C0", lw=2, label=f"{100 * level:g}% interval")
    ax.plot(table["mean"], rows, "o", color="C0", label="posterior mean" if fit.method != "em" else "mode")
    ax.axvline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_yticks(rows, table.index, fontsize=8 if len(table) > 30 else 10)
    ax.set_ylim(-0.7, len(table) - 0.3)
    unit = "per SD of the predictor" if standardize else "per unit of the predictor"
    ax.set_xlabel(f"change in the decision value f {unit}")
    ax.set_ylabel("fixed effect")
    ax.set_title(f"Fixed effects ({fit.method}), SVM decision scale" + (": standardised" if standardize else ""))
    ax.legend(loc="best", fontsize=8)
    return ax


def plot_ranef(fit, group: str, term: str = "(Intercept)", level: float = 0.95, ax=None):
    """Caterpillar plot of one random-effect term: levels sorted by posterior mean, with intervals."""
    if group not in fit.ranef:
        raise BayesvmError(f"no grouping factor {group!r}; the fit has {sorted(fit.ranef)}")
    means, sds = fit.ranef[group], fit.ranef_sd[group]
    if term not in means.columns:
        raise BayesvmError(f"grouping factor {group!r} has no term {term!r}; terms: {list(means.columns)}")
    from scipy.stats import norm

    order = np.argsort(means[term].to_numpy())
    mean = means[term].to_numpy()[order]
    half = norm.ppf(0.5 + level / 2.0) * sds[term].to_numpy()[order]
    ax = _axes(ax)
    x = np.arange(mean.size)
    if np.all(np.isfinite(half)):
        ax.vlines(x, mean - half, mean + half, color="C0", lw=0.8, label=f"{100 * level:g}% interval")
    ax.plot(x, mean, ".", color="C1", label="posterior mean")
    ax.axhline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel(f"{group} levels, sorted by their random effect ({mean.size})")
    ax.set_ylabel(f"{term} random effect (decision scale f)")
    ax.set_title(f"Random effects: {term} | {group}")
    ax.legend(loc="upper left", fontsize=8)
    return ax


def plot_inclusion(fit, ax=None, labels: bool = True):
    """Posterior inclusion probabilities as bars coloured by ``P(slope > 0 | included)``, after Luts & Ormerod's
    Fig. 3.

    Yellow bars mean a likely positive association with the +1 class, dark purple ones a likely negative one; no
    shade is white, so every bar shows against the background.  The colour bar is the legend.  The figure widens
    with the number of predictors.
    """
    table = fit.inclusion
    if table is None:
        raise BayesvmError("plot_inclusion needs a fit with a selection prior (prior=LaplaceZero(), SpikeSlab(), ...)")
    if table["p_include"].isna().all():
        raise BayesvmError("this fit has no inclusion probabilities (the lasso prior has no mass at zero)")
    if ax is None:
        plt = _pyplot()
        _, ax = plt.subplots(figsize=(max(6.4, 0.18 * len(table) + 1.5), 4.6), layout="constrained")
    from matplotlib import cm
    from matplotlib.colors import Normalize

    shade = np.where(table["p_include"] > 0, table["p_positive"] / np.maximum(table["p_include"], 1e-300), 0.5)
    colors = _shading_map()(np.clip(shade, 0.0, 1.0))
    positions = np.arange(len(table))
    ax.bar(positions, table["p_include"], color=colors, edgecolor="black", linewidth=0.5)
    ax.axhline(0.5, color="C3", lw=0.8, ls="--", label="0.5: selected above")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("posterior inclusion probability")
    ax.set_xlabel("predictor")
    if labels:
        ax.set_xticks(positions)
        ax.set_xticklabels(table.index, rotation=90, fontsize=7)
    mappable = cm.ScalarMappable(norm=Normalize(0.0, 1.0), cmap=_shading_map())
    bar = ax.figure.colorbar(mappable, ax=ax, fraction=0.04, pad=0.01)
    bar.set_label("P(slope > 0 | included)", fontsize=8)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Inclusion probabilities: {type(fit.model.prior).__name__} prior, {fit.method}")
    return ax


def _shading_map():
    """The colours of ``P(slope > 0 | included)`` from 0 to 1: viridis, which has no white."""
    from matplotlib import cm

    return cm.viridis


def plot_calibration(fit, newdata=None, bins: int = 10, ax=None):
    """Reliability diagram: observed fraction positive against mean predicted probability per bin.

    ``fit`` is a fit (its :meth:`~bayesvm.results.fit.BSVMFit.calibration` on ``newdata``, or the
    cross-validated training predictions when ``newdata`` is None) or a ready
    :class:`~bayesvm.results.calibration.CalibrationReport`.  Each point is labelled with its row count;
    the diagonal is perfect calibration; the title gives the log loss, Brier score and ECE.
    """
    report = fit.calibration(newdata, bins=bins) if callable(getattr(fit, "calibration", None)) else fit
    table = report.reliability
    ax = _axes(ax)
    ax.plot([0.0, 1.0], [0.0, 1.0], color="grey", lw=0.8, ls="--", label="perfect calibration")
    ax.plot(table["mean_predicted"], table["observed"], "o-", color="C0", label="bayesvm (calibrated)")
    for x, y, count in zip(table["mean_predicted"], table["observed"], table["count"]):
        ax.annotate(f"{int(count)}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8, color="C0")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("mean predicted probability (bin)")
    ax.set_ylabel("observed fraction positive")
    scores = report.metrics.loc["prob"]
    ax.set_title(
        f"Calibration, {report.source}: log loss {scores['log_loss']:.3f}, Brier {scores['brier']:.3f}, "
        f"ECE {scores['ece']:.3f} (labels: rows per bin)",
        fontsize=9,
    )
    ax.legend(loc="upper left", fontsize=8)
    return ax
