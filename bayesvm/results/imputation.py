"""Imputation report (``missing="impute"``): what was imputed, how sure, and the fitted imputation model.

All numbers are on the predictors' original scale: the engines work with ``z = (d - m) / s`` (observed
mean and SD), so an imputed value is ``m + s E[z]`` with SD ``s SD(z)``, ``mu = m + s E[mu_z]`` and the
correlation matrix is that of ``E[Sigma_z]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ImputationReport:
    """Attributes
    ----------
    variables
        Per imputation variable: ``n_missing``, ``observed_mean``, ``observed_sd``, ``imputed_mean``
        (average of the imputed values' posterior means), ``imputed_sd_mean`` (average posterior SD of an
        imputed value), ``mu`` (posterior mean of the imputation model's mean).
    correlation
        Correlation matrix of the imputation model (from the posterior mean of ``Sigma``).
    rows
        One row per imputed value: ``row`` (label in the data), ``variable``, posterior ``mean`` and ``sd``.
    model
        ``"mi"``: multiple imputation from the normal model given the class (``mu`` and the correlations
        are its moments over both classes); ``"joint"``: the paper's joint model.
    """

    variables: pd.DataFrame
    correlation: pd.DataFrame
    rows: pd.DataFrame
    method: str
    model: str = "joint"

    def __str__(self) -> str:
        n_rows = self.rows["row"].nunique()
        kind = {"mi": "multiple imputation, normal model given the class", "joint": "joint normal model"}[self.model]
        return (
            f"Imputation ({self.method}; {kind}, missing completely at random): "
            f"{len(self.rows)} values in {n_rows} rows\n"
            + self.variables.to_string(float_format=lambda v: f"{v:.4g}")
            + "\nCorrelations of the imputation model:\n"
            + self.correlation.to_string(float_format=lambda v: f"{v:.3f}")
        )


def imputation_moments(fit) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(z mean (n, V), z sd (n, V), E[mu_z], E[Sigma_z])`` on the engine's standardised scale."""
    moments = fit.result.imputation_moments
    if moments is None:
        raise TypeError("not an imputation fit")
    return moments()


def imputed_values(fit) -> pd.DataFrame:
    """One row per imputed value on the imputation scale: ``row`` (label in the data), ``column`` (the variable's
    index), ``mean`` and ``sd``: from the output's own list where it keeps one (out-of-core data), else from its
    ``(n, V)`` moments at the missing entries."""
    cells = fit.result.imputed_cells
    if cells is not None:
        return cells
    z_mean, z_sd, _, _ = imputation_moments(fit)
    rows, columns = np.nonzero(fit.model.design.imputation.missing)
    return pd.DataFrame({"row": fit.model.design.row_index[rows], "column": columns, "mean": z_mean[rows, columns],
                         "sd": z_sd[rows, columns]})  # fmt: skip


def build_report(fit) -> ImputationReport:
    layout = fit.model.design.imputation
    m, s, _, _ = fit.model.imputation_scaling()
    _, _, mu, sigma = imputation_moments(fit)
    cells = imputed_values(fit)
    names = list(layout.variables)
    column = cells["column"].to_numpy()
    values = m[column] + s[column] * cells["mean"].to_numpy()
    sds = s[column] * cells["sd"].to_numpy()
    counts = layout.n_missing
    table = pd.DataFrame(
        {
            "n_missing": [counts.get(name, 0) for name in names],
            "observed_mean": m,
            "observed_sd": s,
            "imputed_mean": [values[column == j].mean() if (column == j).any() else np.nan for j in range(len(names))],
            "imputed_sd_mean": [sds[column == j].mean() if (column == j).any() else np.nan for j in range(len(names))],
            "mu": m + s * mu,
        },
        index=pd.Index(names, name="variable"),
    )
    sd = np.sqrt(np.diag(sigma))
    corr = pd.DataFrame(sigma / np.outer(sd, sd), index=names, columns=names)
    rows = pd.DataFrame({"row": cells["row"].to_numpy(), "variable": [names[j] for j in column], "mean": values,
                         "sd": sds})  # fmt: skip
    return ImputationReport(variables=table, correlation=corr, rows=rows, method=fit.method,
                            model=fit.result.imputation_mode or "joint")  # fmt: skip


def conditional_imputation(fit, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New rows with missing entries (NaN in ``values``, raw scale ``(n, V)``): the conditional normal of
    the missing given the observed under the fitted imputation model (posterior means of ``mu`` and
    ``Sigma``).  Returns ``z`` means ``(n, V)`` (observed entries kept) and covariances ``(n, V, V)``."""
    m, s, _, _ = fit.model.imputation_scaling()
    _, _, mu, sigma = imputation_moments(fit)
    z = (values - m) / s
    missing = np.isnan(z)
    n, V = z.shape
    cov = np.zeros((n, V, V))
    z = np.where(missing, 0.0, z)
    keys, inverse = np.unique(missing, axis=0, return_inverse=True)
    for k, mis in enumerate(keys):
        if not mis.any():
            continue
        rows = np.flatnonzero(inverse.ravel() == k)
        obs = ~mis
        S_mo, S_oo = sigma[np.ix_(mis, obs)], sigma[np.ix_(obs, obs)]
        gain = np.linalg.solve(S_oo, S_mo.T).T if obs.any() else np.zeros((mis.sum(), 0))
        z[np.ix_(rows, mis)] = mu[mis] + (z[np.ix_(rows, obs)] - mu[obs]) @ gain.T
        block = sigma[np.ix_(mis, mis)] - gain @ S_mo.T
        full = np.zeros((V, V))
        full[np.ix_(mis, mis)] = block
        cov[rows] = full
    return z, cov


def plot_imputation(fit, ax=None):
    """Observed values against the imputed posterior means, per variable with missing values (histograms)."""

    report = build_report(fit)
    layout = fit.model.design.imputation
    names = [v for v, k in report.variables["n_missing"].items() if k > 0]
    if ax is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.2), squeeze=False)
        axes = list(axes[0])
    else:
        axes = [ax] if len(names) == 1 else list(ax)
    for axis, name in zip(axes, names):
        j = layout.variables.index(name)
        observed = layout.values[~layout.missing[:, j], j]
        imputed = report.rows.loc[report.rows["variable"] == name, "mean"]
        bins = np.histogram_bin_edges(np.concatenate([observed, imputed]), bins=30)
        axis.hist(observed, bins=bins, density=True, alpha=0.5, label=f"observed ({observed.size})")
        axis.hist(imputed, bins=bins, density=True, alpha=0.5, label=f"imputed means ({imputed.size})")
        axis.set_xlabel(name)
        axis.legend(fontsize=8)
    axes[0].set_ylabel("density")
    return axes[0] if len(axes) == 1 else axes
