"""Multiple imputation of missing predictors from a normal model given the class (``imputation="mi"``).

Why not the paper's joint model (:mod:`bayesvm.engines.imputation.joint_model`, ``imputation="joint"``): there the
pseudo-likelihood ``exp(-2 max(0, 1 - y f))`` also acts as the likelihood of a missing ``x``.  It is not
normalised over ``y`` (``exp(-2(1 - f)_+) + exp(-2(1 + f)_+)`` grows with ``|f|``), so it rewards imputed
values beyond the margin and inflates the imputed predictor's coefficient (Gibbs shows the same; on
simulated MCAR data the paper's model lands farther from the full-data fit than complete cases).

Here the imputation model is a proper generative model of the predictors given the class, the one the
multiple-imputation literature recommends (the outcome must inform the imputations, or the imputed
predictor's coefficient is attenuated):

    z_i | y_i ~ N(B' u_i, Sigma),   u_i = (1, y_i),   B ~ MN(0, s^2 I_2, Sigma),   Sigma ~ IW(nu, Psi),

on the engine's standardised scale (``s^2``, ``nu``, ``Psi`` from ``PriorSet.imputation``), missing
completely at random.  Its posterior does not involve the SVM, so it is sampled exactly by data
augmentation (Tanner & Wong 1987), each step:

* ``z_{i,M} | z_{i,O}, B, Sigma``: the conditional normal (vectorised per missingness pattern);
* ``B | z, Sigma ~ MN(G^-1 U'z, G^-1, Sigma)``, ``G = U'U + I / s^2``;
* ``Sigma | z, B ~ IW(nu + n + 2, Psi + (z - U B)'(z - U B) + B'B / s^2)``.

The SVM posterior is then the "cut" posterior ``p(theta | y, x_obs) = E_{z_mis | y, x_obs} p(theta | y,
z)``: feedback from the SVM to the imputations is cut (Plummer 2015), which is what multiple imputation
computes.  ``method="vb"``: ``M`` imputations (thinned draws of the chain), a VB fit on each completed data
set, and the mixture of the ``M`` Gaussians as the posterior (represented by equally many draws from
each; its variance is the within- plus between-imputation variance, Rubin's rules without the 1/M
term).  ``method="gibbs"``: one imputation step per Gibbs iteration, then ``theta | z`` as usual, which
samples the same cut posterior (:func:`bayesvm.engines.imputation.joint_model.run_impute_chain`).

Reported ``mu`` and ``Sigma`` are the model's marginal moments over the classes: ``mu = B'(1, ybar)``,
``Sigma + (1 - ybar^2) delta delta'`` with ``delta`` the class row of ``B`` (prediction rows have no class).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from ...linalg.dense import runs_with_blas_threads
from ...model.problems import ImputationProblem, SelectionProblem
from ..joint import log_component_prior, log_prior, predictor_draws
from ..linear.ep import fit_accurate
from ..linear.svi import fit_linear_svi
from ..linear.vb import VBResult, coordinate_ascent
from ..selection.ep import fit_selection_accurate
from ..selection.laws import law_of
from ..selection.svi import fit_selection_svi
from .joint_model import ImputedGibbsDraws, ImputedGibbsResult
from .normal_model import sample_imputations


@dataclass
class MultipleImputationResult(ImputedGibbsResult):
    """VB on ``M`` completed data sets, pooled: draws of the mixture of the ``M`` Gaussians, shuffled and split
    into 4 chains of independent draws.

    ``fits`` keeps each completed-data VB result (each with its own monotone lower bound).
    """

    fits: list[VBResult] = None
    imputation_mode: str = "mi"
    engine: str = "meanfield"  # or "accurate", "svi": the fit on each completed data set

    @property
    def converged(self) -> bool:
        return all(f.converged for f in self.fits)

    @property
    def n_iter(self) -> int:
        return int(sum(f.n_iter for f in self.fits))


def completed_data_draws(fit, engine: str, rng: np.random.Generator, count: int) -> tuple:
    """``(theta_d, theta_b, components)``: ``count`` draws of one completed data set's posterior: the accurate fit's
    mixture over nodes (``engine="accurate"``), else the Gaussian ``q(theta)`` and each component's ``q``."""
    if engine == "accurate":
        return fit.sample(rng, count)
    d, b = fit.theta.sample(rng, count)
    return d, b, [post.sample(rng, count) for post in fit.components]


def pooling(rng: np.random.Generator, total: int):
    """``pooled(parts)``: the completed data sets' draws (a list of arrays, ``total`` draws in all) stacked, shuffled and
    split into 4 chains (1 when ``total`` is not a multiple of 4); independent draws, shuffled, so any split into chains
    is exchangeable.  ``pooled.chains`` is the number of chains."""
    order = rng.permutation(total)
    chains = 4 if total % 4 == 0 else 1

    def pooled(parts):
        stacked = np.concatenate(parts)[order]
        return stacked.reshape((chains, total // chains) + stacked.shape[1:])

    pooled.chains = chains
    return pooled


@runs_with_blas_threads(lambda problem, **_: problem.base.D.shape[1])
def fit_mi_vb(
    problem: ImputationProblem,
    imputations: int = 20,
    draws_per_imputation: int = 100,
    burn: int = 100,
    thin: int = 5,
    seed=None,
    tol: float = 1e-8,
    max_iter: int = 500,
    engine: str = "meanfield",
    svi_options: dict | None = None,
) -> MultipleImputationResult:
    """Multiple imputation with a VB fit per completed data set (module docstring).  ``engine``:
    ``"meanfield"`` (Alg. 1-2), ``"accurate"`` (:func:`bayesvm.engines.linear.ep.fit_accurate`: EP integrated over the
    variance parameters; its mixture draws are pooled the same way) or ``"svi"``
    (:func:`bayesvm.engines.linear.svi.fit_linear_svi` with ``svi_options``, each fit seeded from ``seed``)."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    imp = sample_imputations(problem, imputations, burn, thin, rng)
    base = problem.base
    codes = None if base.blocked is None else base.blocked.codes
    values = None if base.blocked is None else base.blocked.values
    fits, theta_d, theta_b, comps, lp = [], [], [], [], []
    for m in range(imputations):
        D = problem.design(imp.z[m])
        if engine == "accurate":
            fit = fit_accurate(replace(base, D=D))
        elif engine == "svi":
            options = dict(svi_options or {}, seed=int(rng.integers(2**31)), tol=tol, max_iter=max_iter)
            fit = fit_linear_svi(replace(base, D=D), **options)
        else:
            fit = coordinate_ascent(replace(base, D=D), tol, max_iter, True)
        d, b, c = completed_data_draws(fit, engine, rng, draws_per_imputation)
        fits.append(fit)
        theta_d.append(d)
        theta_b.append(b)
        comps.append(c)
        f = predictor_draws(d, b, D, codes, values)
        hinge = np.maximum(1.0 - base.y[None, :] * f, 0.0)
        hinge = -2.0 * (hinge if base.weights is None else hinge * base.weights).sum(axis=1)  # log pseudo-likelihood
        lp.append([hinge[s] + log_prior(base, d[s], b[s], [x[s] for x in c]) for s in range(draws_per_imputation)])
    pooled = pooling(rng, imputations * draws_per_imputation)
    theta_d, theta_b = pooled(theta_d), pooled(theta_b)
    components = [pooled([c[k] for c in comps]) for k in range(len(base.components))]
    z_mean = imp.z.mean(axis=0)
    z_var = imp.z.var(axis=0, ddof=1) if imputations > 1 else np.zeros_like(z_mean)
    z_var[~problem.missing] = 0.0
    return MultipleImputationResult(
        theta_d=theta_d, theta_b=theta_b, components=components,
        log_posterior=pooled([np.asarray(x) for x in lp]),
        elapsed=time.perf_counter() - start, tune=0, thin=1, seed=seed,
        imputation=ImputedGibbsDraws(
            z_mean=z_mean, z_var=z_var, mu=pooled([np.repeat(imp.mu, draws_per_imputation, axis=0)]),
            sigma=pooled([np.repeat(imp.sigma, draws_per_imputation, axis=0)]),
        ),
        fits=fits, engine=engine,
    )  # fmt: skip


@dataclass
class PooledSelectionResult(MultipleImputationResult):
    """Selection-prior VB or SVI (Laplace-zero, Alg. 3; spike-and-slab; lasso) on ``M`` completed data sets, pooled as :class:`MultipleImputationResult`, with
    the indicators ``include`` (``(chains, draws, m)``, drawn from each fit's ``q(gamma)``) and ``selected``."""

    include: np.ndarray = None
    selected: np.ndarray = None
    scale: np.ndarray = None  # (chains, draws) draws of sigma_u, the Laplace scale (None for spike-and-slab)

    @property
    def scale_estimate(self) -> tuple[str, float] | None:
        """The prior's scale averaged over the pooled draws (the engine-output contract)."""
        return None if self.scale is None else ("E[{s}]", float(np.mean(self.scale)))


@runs_with_blas_threads(lambda problem, selection, **_: selection.q)
def fit_mi_selection_vb(
    problem: ImputationProblem,
    selection: SelectionProblem,
    imputations: int = 20,
    draws_per_imputation: int = 100,
    burn: int = 100,
    thin: int = 5,
    seed=None,
    tol: float = 1e-8,
    max_iter: int = 2000,
    engine: str = "vb",
    svi_options: dict | None = None,
) -> PooledSelectionResult:
    """Multiple imputation with a selection-prior VB fit per completed data set (Laplace-zero:
    :func:`bayesvm.engines.selection.vb.fit_laplace_zero_vb`; spike-and-slab:
    :func:`bayesvm.engines.selection.spike_slab_vb.fit_spike_slab_vb`); ``selection.X`` has the imputed columns of
    ``problem`` (same rows and column order).  ``engine="svi"``: :func:`bayesvm.engines.selection.svi.fit_selection_svi`
    with ``svi_options`` instead, each fit seeded from ``seed``; ``engine="accurate"``:
    :func:`bayesvm.engines.selection.ep.fit_selection_accurate` (its draws carry each slope to its tilted
    distribution, and the prior's scale is the draw's node).

    The pooled draws carry ``log p`` = log pseudo-likelihood + the unpenalised coefficients' normal prior +
    the random-effect terms' prior + the slopes' prior (Laplace-zero: at a draw of ``sigma_u^2`` from ``q``)."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    imp = sample_imputations(problem, imputations, burn, thin, rng)
    prior = selection.prior
    free, sel = selection.unselected, selection.selected
    fits, coefs, gammas, comps, lp, scales = [], [], [], [], [], []
    law = law_of(prior)
    for m in range(imputations):
        completed = replace(selection, X=problem.design(imp.z[m]))
        scale_draws = None
        if engine == "accurate":
            fit = fit_selection_accurate(completed)
            coef, _, c, node = fit.sample_nodes(rng, draws_per_imputation)
            gamma = (coef[:, sel] != 0).astype(np.int8)
            if fit.slopes.node_scale is not None:
                scale_draws = fit.slopes.node_scale[node]
        else:
            if engine == "svi":
                options = dict(svi_options or {}, seed=int(rng.integers(2**31)), tol=tol, max_iter=max_iter)
                fit = fit_selection_svi(completed, **options)
            else:
                fit = law.mean_field(completed, tol=tol, max_iter=max_iter)
            coef, gamma = fit.sample(rng, draws_per_imputation)
            c = [post.sample(rng, draws_per_imputation) for post in fit.components]
        fits.append(fit)
        coefs.append(coef)
        gammas.append(gamma)
        comps.append(c)
        f = coef @ completed.X.T
        hinge = np.maximum(1.0 - selection.y[None, :] * f, 0.0)
        total = -2.0 * (hinge if selection.weights is None else hinge * selection.weights).sum(axis=1)
        lam = selection.fixed_precision[free]
        total += 0.5 * np.sum(np.log(lam) - np.log(2.0 * np.pi) - lam * coef[:, free] ** 2, axis=1)
        slopes, scale = law.log_prior(selection.prior_scale, fit, coef[:, sel], gamma.astype(bool), rng, scale_draws)
        total += slopes
        if scale is not None:
            scales.append(scale)
        total += [log_component_prior(selection.components, coef[s], np.zeros((0, 0)), [x[s] for x in c])
                  for s in range(draws_per_imputation)]  # fmt: skip
        lp.append(total)
    count = imputations * draws_per_imputation
    pooled = pooling(rng, count)
    chains = pooled.chains
    z_mean = imp.z.mean(axis=0)
    z_var = imp.z.var(axis=0, ddof=1) if imputations > 1 else np.zeros_like(z_mean)
    z_var[~problem.missing] = 0.0
    return PooledSelectionResult(
        theta_d=pooled(coefs), theta_b=np.zeros((chains, count // chains, 0, 0)),
        components=[pooled([c[k] for c in comps]) for k in range(len(selection.components))],
        log_posterior=pooled(lp), elapsed=time.perf_counter() - start, tune=0, thin=1, seed=seed,
        imputation=ImputedGibbsDraws(
            z_mean=z_mean, z_var=z_var, mu=pooled([np.repeat(imp.mu, draws_per_imputation, axis=0)]),
            sigma=pooled([np.repeat(imp.sigma, draws_per_imputation, axis=0)]),
        ),
        fits=fits, include=pooled(gammas), selected=sel, scale=pooled(scales) if scales else None,
        engine=engine if engine in ("svi", "accurate") else "meanfield",
    )  # fmt: skip
