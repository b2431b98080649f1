"""Plots of a fit (matplotlib; ``pip install "bayesvm[plot]"``).  Each returns the Axes it drew on."""

from __future__ import annotations

import numpy as np

from .errors import BayesvmError


def _axes(ax):
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError('bayesvm.plots needs matplotlib: pip install "bayesvm[plot]"') from None
    if ax is None:
        _, ax = plt.subplots()
    return ax


def plot_lower_bound(fit, ax=None):
    """The VB lower bound ``log p(y; q)`` after every sweep."""
    if fit.lower_bound.size == 0:
        raise BayesvmError(f"a {fit.method!r} fit has no lower bound; plot_lower_bound needs method='vb'")
    ax = _axes(ax)
    sweeps = np.arange(1, fit.lower_bound.size + 1)
    ax.plot(sweeps, fit.lower_bound, marker=".")
    ax.set_xlabel("sweep")
    ax.set_ylabel("lower bound log p(y; q)")
    ax.set_title(f"converged after {fit.n_iter} sweeps" if fit.converged else "NOT converged")
    return ax


def plot_coefficients(fit, level: float = 0.95, intercept: bool = False, ax=None):
    """Forest plot: posterior mean and central credible interval of each fixed effect."""
    table = fit.summary(level=level).fixed
    if not intercept:
        table = table.drop(index="(Intercept)", errors="ignore")
    if table.empty:
        raise BayesvmError("the model has no fixed effects besides the intercept to plot")
    ax = _axes(ax)
    rows = np.arange(len(table))[::-1]
    lower, upper = table.columns[2:4] if table.shape[1] >= 4 else (None, None)
    if lower is not None:
        ax.hlines(rows, table[lower], table[upper], color="C0", lw=2)
    ax.plot(table["mean"], rows, "o", color="C0")
    ax.axvline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_yticks(rows, table.index)
    ax.set_xlabel(f"coefficient ({int(100 * level)}% interval)" if lower is not None else "coefficient (mode)")
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
        ax.vlines(x, mean - half, mean + half, color="C0", lw=0.8)
    ax.plot(x, mean, ".", color="C1")
    ax.axhline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel(f"{group} (sorted)")
    ax.set_ylabel(f"{term} random effect")
    return ax


def plot_inclusion(fit, ax=None, labels: bool = True):
    """Posterior inclusion probabilities as bars shaded by ``P(slope > 0 | y)``, as Luts & Ormerod's Fig. 3.

    Darker bars mean a likely positive association with the +1 class, lighter ones a likely negative one.
    """
    table = fit.inclusion
    if table is None:
        raise BayesvmError("plot_inclusion needs a fit with a selection prior (prior=LaplaceZero(), SpikeSlab(), ...)")
    if table["p_include"].isna().all():
        raise BayesvmError("this fit has no inclusion probabilities (the lasso prior has no mass at zero)")
    ax = _axes(ax)
    from matplotlib import cm

    shade = np.where(table["p_include"] > 0, table["p_positive"] / np.maximum(table["p_include"], 1e-300), 0.5)
    colors = cm.Greys(0.05 + 0.9 * np.clip(shade, 0.0, 1.0))
    positions = np.arange(len(table))
    ax.bar(positions, table["p_include"], color=colors, edgecolor="black", linewidth=0.5)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("posterior inclusion probability")
    if labels:
        ax.set_xticks(positions)
        ax.set_xticklabels(table.index, rotation=90, fontsize=7)
    ax.set_title(f"{type(fit.model.prior).__name__} ({fit.method}): shading = P(slope > 0 | included)")
    return ax


def plot_calibration(fit, newdata=None, bins: int = 10, ax=None):
    """Reliability diagram: observed fraction positive against mean predicted probability per bin.

    ``fit`` is a fit (its :meth:`~bayesvm.results.fit.BSVMFit.calibration` on ``newdata``, or the
    cross-validated training predictions when ``newdata`` is None) or a ready
    :class:`~bayesvm.results.calibration.CalibrationReport`.  Each point is labelled with its row count;
    the diagonal is perfect calibration; the title gives the log loss, Brier score and ECE.
    """
    from .results.calibration import CalibrationReport

    report = fit if isinstance(fit, CalibrationReport) else fit.calibration(newdata, bins=bins)
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
