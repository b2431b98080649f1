"""Convergence diagnostics: R-hat and effective sample sizes for MCMC fits (via ArviZ)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..engines import variance_prior
from ..model.problems import PENALTY_SOURCE

#: Thresholds (Vehtari et al. 2021): R-hat above 1.01, or fewer than 100 effective draws per chain.
RHAT_LIMIT = 1.01
ESS_PER_CHAIN = 100


def mcmc_diagnostics(fit) -> pd.DataFrame:
    """``r_hat``, ``ess_bulk`` and ``ess_tail`` of the fixed effects and variance-component SDs.

    Indexed like ``summary().fixed`` for the fixed effects, then ``sd_<group>[<term>]`` and ``slope_prior_sd``
    (the learned penalty's SD), as ArviZ's ``summary`` labels them.
    """
    import warnings

    from .arviz import import_arviz, posterior_dataset

    az = import_arviz()
    posterior = posterior_dataset(fit, draws=1, seed=0)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        # a slope a selection prior kept at exactly 0 in every draw has no R-hat or ESS (NaN, not flagged)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _diagnostics_table(az, posterior)


def _diagnostics_table(az, posterior) -> pd.DataFrame:
    from .arviz import PENALTY_SD

    names = ["beta"] + [v for v in posterior.data_vars if v.startswith("sd_") or v == PENALTY_SD]
    rows = {}
    for stat, func in (
        ("r_hat", lambda d: az.rhat(d)),
        ("ess_bulk", lambda d: az.ess(d, method="bulk")),
        ("ess_tail", lambda d: az.ess(d, method="tail")),
    ):
        if stat == "r_hat" and posterior.sizes["chain"] < 2:  # R-hat compares chains: undefined for one (NaN)
            values = posterior[names].isel(chain=0, draw=0) * np.nan
        else:
            values = func(posterior[names])
        column = {}
        for coef, value in zip(posterior["coef"].values, np.atleast_1d(values["beta"].values)):
            column[str(coef)] = float(value)
        for name in names[1:]:
            array = values[name]
            if array.ndim == 0:
                column[name] = float(array.values)
            else:
                (dim,) = array.dims
                for term, value in zip(array[dim].values, array.values):
                    column[f"{name}[{term}]"] = float(value)
        rows[stat] = column
    return pd.DataFrame(rows)


def mcmc_problems(
    table: pd.DataFrame,
    chains: int,
    draws: int | None = None,
    separated: str | None = None,
    cause: str | None = None,
) -> str | None:
    """A warning text when some R-hat exceeds 1.01 or some ESS is below 100 per chain, else None.

    With ``draws`` (per chain) it says how long to run: the ESS grows about linearly with the draws, so
    ``draws * target / min ESS`` per chain (rounded up to a hundred) reaches the target; where only R-hat
    fails, twice the draws (and as many tuning iterations).  ``separated`` (:func:`separated_chains`): a chain that
    sat apart from the others, named in place of that advice where R-hat fails (longer chains need not merge it).
    ``cause`` (:func:`separation_tail`): a reason longer chains cannot settle the numbers, in place of any advice.
    """
    bad_rhat = table.index[table["r_hat"] > RHAT_LIMIT].tolist()
    low = ESS_PER_CHAIN * chains
    ess = table[["ess_bulk", "ess_tail"]].min(axis=1)
    bad_ess = table.index[ess < low].tolist()
    parts = []
    if bad_rhat:
        parts.append(f"R-hat > {RHAT_LIMIT} for {bad_rhat}")
    if bad_ess:
        parts.append(f"effective sample size below {low} for {bad_ess}")
    if not parts:
        return None
    advice = "run longer chains (more tune and draws) before trusting these numbers"
    if draws:
        worst = float(np.nanmin(ess.to_numpy())) if bad_ess else float("nan")
        if bad_ess and worst > 0:
            needed = int(np.ceil(draws * low / worst / 100.0) * 100)
        else:
            needed = 2 * draws
        advice = f"run about draws={needed} per chain (and as many tune) before trusting these numbers"
    if separated and bad_rhat:
        advice = separated
    if cause:
        advice = cause
    return "; ".join(parts) + ": " + advice


def separation_tail(fit) -> str | None:
    """Why longer chains cannot settle a fit whose fixed effects separate the classes under a learned penalty, or
    None: along the separating direction the hinge loss never grows, and the slopes' prior, a normal scaled by the
    learned variance whose prior's inverse gamma (given any auxiliary variable) has shape ``a``, has the tails of a t
    with ``2 a`` degrees of freedom (0.02 with the default ``IG(0.01, 0.01)``; ``nu`` for a half-t), so the
    posterior there has no mean to converge to where ``2 a <= 1`` (a simulated n = 20 set: Gibbs means of 1e38 to
    1e112)."""
    model = fit.model
    penalty = [c for c in fit.problem.components if c.source == PENALTY_SOURCE]
    if model.prior is not None or not penalty:  # (a fixed penalty or a selection prior keeps a mean)
        return None
    if 2.0 * variance_prior.conditional_inverse_gamma(penalty[0], None)[0] > 1.0:
        return None
    culprits = [c for f in fit.diagnostics.findings if f.check == "separation" for c in f.culprits]
    if not culprits:
        return None
    return (
        f"the classes are separated by {culprits} (Identifiability) and the penalty is learned, so along the "
        "separating direction the posterior's tail is too heavy to have a mean: longer chains will not settle these "
        "numbers; fix the penalty (e.g. penalty=1) or check how the separating column(s) were recorded"
    )


#: A chain whose mean of a quantity lies this many pooled within-chain SDs from the median of the other chains' means
#: sat in another region of the posterior for all its draws (:func:`separated_chains`).
SEPARATION_SDS = 2.0


#: The advice where a chain of the joint imputation model sat apart on an imputed column's coefficient
#: (:func:`separated_chains`; ``ChainStart`` in ``engines/imputation/joint_model.py``).
JOINT_MODES_ADVICE = (
    "the joint imputation model (imputation='joint') can have several modes in which an imputed column's coefficient "
    "differs, even in sign, as the imputations are pulled towards their rows' class by the unnormalised hinge "
    "pseudo-likelihood ({columns} here): no single mode is the answer; imputation='mi' (what 'auto' chooses for Gibbs) has no such pull"
)


def separated_chains(values: np.ndarray, names: list[str], imputed: list[str] | None = None) -> str | None:
    """The chains that sat apart from the others, or None: for each quantity (``values``: ``(chains, draws, k)``), a
    chain whose mean lies more than :data:`SEPARATION_SDS` pooled within-chain SDs from the median of the other
    chains' means.  Ordinary slow mixing (R-hat 1.01-1.05) moves chain means by a fraction of an SD; a chain stuck in
    another mode lies several SDs away, and more draws of the same chains need not bring it back.  ``imputed``: the coefficients of columns imputed by the joint model; where a chain sat apart on one of
    them the advice is :data:`JOINT_MODES_ADVICE`."""
    values = np.asarray(values, dtype=float)
    chains = values.shape[0]
    if chains < 3 or values.shape[1] < 2:
        return None
    means = values.mean(axis=1)  # (chains, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = np.sqrt(np.nanmean(values.var(axis=1, ddof=1), axis=0))
        found: dict[int, list[int]] = {}
        for c in range(chains):
            others = np.median(np.delete(means, c, axis=0), axis=0)
            distance = np.abs(means[c] - others) / pooled
            for k in np.flatnonzero(np.isfinite(distance) & (distance > SEPARATION_SDS)):
                found.setdefault(c, []).append(int(k))
    if not found or len(found) * 2 >= chains:  # (half the chains or more apart: no majority to name against)
        return None
    parts = []
    for c, columns in found.items():
        k = columns[0]
        others = np.delete(means[:, k], c)
        parts.append(
            f"chain {c + 1} sat apart from the others on {[names[j] for j in columns][:4]} ({names[k]!r}: mean "
            f"{means[c, k]:.3g} against {others.min():.3g} to {others.max():.3g}, {pooled[k]:.2g} within-chain SD)"
        )
    apart = {names[k] for columns in found.values() for k in columns}
    modes = [name for name in imputed or [] if name in apart]
    if modes:
        return "; ".join(parts) + ": " + JOINT_MODES_ADVICE.format(columns=modes)
    return (
        "; ".join(parts) + ": a region of the posterior that the other chains did not visit, or the reverse, for all "
        "the draws; longer chains need not merge them: run more chains (e.g. chains=8) and compare with the default fit"
    )


def sampled_fit_problems(fit, table: pd.DataFrame) -> str | None:
    """:func:`mcmc_problems` of a sampled fit (``table``: its :func:`mcmc_diagnostics`), naming a chain that sat apart
    (:func:`chain_separation`) where R-hat fails, or the separation that leaves no mean (:func:`separation_tail`): the
    warning at the fit's end and ``summary()`` say the same."""
    separated = chain_separation(fit) if bool((table["r_hat"] > RHAT_LIMIT).any()) else None
    return mcmc_problems(table, fit.result.chains, fit.result.draws, separated, separation_tail(fit))


def chain_separation(fit) -> str | None:
    """:func:`separated_chains` of a sampled fit's fixed effects and variance-component SDs (the quantities of
    :func:`mcmc_diagnostics`)."""
    from .arviz import PENALTY_SD, posterior_dataset

    posterior = posterior_dataset(fit, draws=1, seed=0)
    arrays, names = [np.asarray(posterior["beta"].values)], [str(c) for c in posterior["coef"].values]
    for name in posterior.data_vars:
        if not (name.startswith("sd_") or name == PENALTY_SD):
            continue
        array = posterior[name]
        if array.ndim == 2:
            arrays.append(np.asarray(array.values)[..., None])
            names.append(name)
        else:
            (dim,) = [d for d in array.dims if d not in ("chain", "draw")]
            arrays.append(np.asarray(array.transpose("chain", "draw", dim).values))
            names.extend(f"{name}[{term}]" for term in array[dim].values)
    imputed = None
    layout = fit.model.design.imputation
    if layout is not None and getattr(fit.result, "imputation_mode", None) == "joint":
        imputed = [str(v) for j, v in enumerate(layout.variables) if layout.missing[:, j].any()]
    return separated_chains(np.concatenate(arrays, axis=2), names, imputed)


#: Inclusion probabilities that differ by more than this between chains, or whose draws (Rao-Blackwellised where kept) have an R-hat
#: above ``INCLUSION_RHAT``, mean that the chains explore different models.
INCLUSION_SPREAD = 0.2
INCLUSION_RHAT = 1.05
#: ... unless the chains' inclusion probabilities all lie within this of each other: draws of a probability near 0 or 1
#: with rare spikes have a large rank-normalised R-hat although every chain says the same (MASS::birthwt with
#: LaplaceZero: 'age' at 0.0001 in every chain, R-hat above 1.05).
INCLUSION_NEGLIGIBLE_SPREAD = 0.02


def inclusion_disagreement(fit) -> str | None:
    """A warning text naming the slopes whose inclusion probabilities disagree across Gibbs chains (selection
    priors with mass at zero), with each chain's range; None when they agree or there is nothing to compare."""
    include = fit.result.include
    inclusion = fit.inclusion
    if include is None or inclusion is None or include.ndim != 3 or include.shape[0] < 2:
        return None
    if inclusion["p_include"].isna().all():  # the lasso: no indicators
        return None
    import warnings

    from .arviz import import_arviz

    az = import_arviz()
    conditional = getattr(fit.result, "include_probability", None)  # Rao-Blackwellised, where the sampler kept it
    indicators = include.astype(float) if conditional is None else conditional
    per_chain = indicators.mean(axis=1)  # (chains, slopes)
    spread = per_chain.max(axis=0) - per_chain.min(axis=0)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        rhat = np.asarray(az.rhat(az.convert_to_dataset({"include": indicators}))["include"].values, dtype=float)
    unmixed = (np.nan_to_num(rhat, nan=1.0) > INCLUSION_RHAT) & (spread > INCLUSION_NEGLIGIBLE_SPREAD)
    bad = np.flatnonzero((spread > INCLUSION_SPREAD) | unmixed)
    if bad.size == 0:
        return None
    names = list(inclusion.index)
    listed = ", ".join(f"{names[j]!r} ({per_chain[:, j].min():.2f}-{per_chain[:, j].max():.2f})" for j in bad[:10]) + (
        f" and {bad.size - 10} more" if bad.size > 10 else ""
    )
    return (
        f"the chains disagree on which variables are in the model: inclusion probability per chain {listed}; "
        "the chains visit different models, so these inclusion probabilities are not yet estimates: run longer "
        "chains (more tune and draws, or draws='auto', which samples until every inclusion probability has R-hat "
        "<= 1.01 and bulk ESS >= 400)"
    )
