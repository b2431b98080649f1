"""One view of the posterior for every engine, so that results code never asks which engine ran.

* :class:`VariationalPosterior`: the Gaussian ``q(theta)`` and the ``q`` of the components.
* :class:`SampledPosterior`: Gibbs draws.
* :class:`ModePosterior`: a posterior mode (EM / ECME).
* :class:`MixturePosterior`: Gaussians over nodes of the variance parameters (the accurate fit).
* :class:`SelectionPosterior`: a spike-and-Gaussian ``q`` per slope.

Each declares what it can give (:class:`PosteriorView`'s capabilities: draws in chains, a single point, a density
``q`` to weigh against the exact posterior, Gaussians over nodes); the results ask those, never the view's name.

Each gives means, marginal variances, the covariance of the (standardised) fixed effects,
the components' posterior means, predictive probabilities for new design rows and joint
draws for ArviZ, all in the model's ``(theta_d, theta_b)`` layout.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..engines.gibbs_driver import GibbsResult
from ..engines.joint import predictor_draws
from ..engines.linear.em import EMResult
from ..engines.linear.ep import IntegratedResult
from ..engines.linear.vb import VBResult
from ..engines.selection.vb import SelectionVBResult
from ..linalg import compiled
from ..linalg.dense import GaussianPosterior
from ..linalg.row_pattern import RowPattern, row_pattern
from .new_levels import ComponentLaw, discrete_law
from .prediction import gaussian_average_probability, pseudo_probability

#: Sampled posteriors form at most about this many values at a time (a chunk of draws' ``f``, of levels' draws, or of
#: rows' gathered covariances).
VALUES_AT_ONCE = 4_000_000


def prediction_pattern(D, codes, thetas: list[GaussianPosterior]) -> RowPattern | None:
    """The rows' and levels' nonzero columns of new rows ``D`` (one pattern for every posterior's predictor), each
    level's holding its gains' support in every posterior (rows of new data need not touch every column the training
    rows did: :func:`bayesvm.linalg.row_pattern.row_pattern`), or None (sparse rows, no numba, or not sparse enough
    to pay)."""
    if sp.issparse(D) or not compiled.available():
        return None
    if codes is None or not thetas[0].mean_b.size:
        return row_pattern(D, None)
    J, _, q = thetas[0].gains.shape
    support = np.zeros((J, q), dtype=bool)
    for theta in thetas:
        support |= theta.gains.support()
    return row_pattern(D, codes, J, support)


class PosteriorView:
    """What a view of the posterior can give; the results (the PSIS check, ``summary()``, the ArviZ export, LOO) ask
    these capabilities, never which engine ran or the view's name.

    Attributes
    ----------
    kind
        The view's name, for messages and the summary's report.
    holds_draws
        MCMC draws in chains (``result.theta_d`` is ``(chains, draws, q)``).
    point
        A single point with no spread (a posterior mode): nothing to draw from.
    approximate
        A density ``q`` fitted to the posterior, which the PSIS check draws from and weighs against the exact one.
    over_nodes
        Gaussians over nodes of the variance parameters with their weights (the accurate fit): its marginal in the
        variance parameters is a mixture over the nodes' cells.
    gaussian_link
        The posterior of each row's ``f`` is the normal of :meth:`link`'s mean and variance, so averages over it
        (the pseudo-likelihood) need nothing more.
    """

    kind = ""
    holds_draws = False
    point = False
    approximate = False
    over_nodes = False
    gaussian_link = False

    def link_mean(self, D, codes, values) -> np.ndarray:
        """Posterior mean of ``f`` alone (what classes and the fit's own checks need): ``f`` is linear in the
        coefficients, so it is ``f`` at their posterior mean, without the variances :meth:`link` computes."""
        mean_d, mean_b = self.means()
        return predictor_draws(mean_d[None], mean_b[None], D, codes, values)[0]


class VariationalPosterior(PosteriorView):
    """Posterior summaries from a VB fit."""

    kind = "variational"
    approximate = True
    gaussian_link = True
    result: VBResult
    theta: object

    def __init__(self, result: VBResult):
        self.result = result
        self.theta = result.theta

    def inclusion(self, sel: np.ndarray, point_mass: bool) -> None:
        """A Gaussian q over the coefficients holds no inclusion (selection priors declare other forms)."""
        return None

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        return self.theta.mean_d, self.theta.mean_b

    def variances(self) -> tuple[np.ndarray, np.ndarray]:
        var_b = np.diagonal(self.theta.cov_b, axis1=1, axis2=2) if self.theta.mean_b.size else np.zeros((0, 0))
        return self.theta.variance(), var_b

    def fixed_cov(self, p: int) -> np.ndarray:
        grid = np.arange(p)
        return self.theta.cov_entries(grid[:, None], grid[None, :])

    def component_means(self) -> list[np.ndarray]:
        return [post.expected_covariance() for post in self.result.components]

    def expected_precision(self, c: int) -> np.ndarray:
        """``E[Sigma_c^-1]`` under ``q``."""
        return self.result.components[c].expected_precision()

    def component_law(self, c: int) -> ComponentLaw:
        """``q`` of component ``c``: inverse gamma (1 x 1) or inverse Wishart."""
        post = self.result.components[c]
        return ComponentLaw("inverse_wishart", shape=float(post.shape), scale=np.asarray(post.scale, dtype=float))

    def link(self, D, codes, values, training: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``f`` (over the rows' and levels' nonzero columns where the dense part is
        wide and mostly zero, as the fit's own sweeps: :func:`prediction_pattern`).  ``training``: ``D`` is the fit's
        own design, whose rows' variances a sparse ``q`` gives from the entries of its precision's pattern (new rows
        need solves)."""
        if isinstance(self.theta, GaussianPosterior):
            return self.theta.predictor(D, codes, values, prediction_pattern(D, codes, [self.theta]))
        return self.theta.predictor(D, codes, values, training=training)

    def probability(self, D, codes, values) -> np.ndarray:
        mean, var = self.link(D, codes, values)
        return gaussian_average_probability(mean, var)

    def draws(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """``(1, size, ...)`` draws of ``theta_d``, ``theta_b`` and each component from q."""
        theta_d, theta_b = self.theta.sample(rng, size)
        return theta_d[None], theta_b[None], _component_draws(self.result.components, rng, size)


def _component_draws(components, rng: np.random.Generator, size: int) -> list[np.ndarray]:
    """``(1, size, k, k)`` draws of each variance component from its ``q``."""
    return [post.sample(rng, size)[None] for post in components]


class SampledPosterior(PosteriorView):
    """Posterior summaries from MCMC draws (chains x draws)."""

    kind = "sampled"
    holds_draws = True
    result: GibbsResult

    def __init__(self, result: GibbsResult):
        self.result = result

    def inclusion(self, sel: np.ndarray, point_mass: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(p_include, p_positive, mean_if_included)`` of the slopes ``sel`` from the draws (Gibbs, or VB pooled
        over imputations), model scale: ``p_include`` the Rao-Blackwellised average of each draw's
        ``P(gamma_k = 1 | the rest)`` where the sampler kept it, else the indicators' share (NaN without a point mass);
        ``p_positive = p_include x`` the share of the including draws in which the slope is positive (so it stays at
        most ``p_include``), or the share of positive draws."""
        result = self.result
        coef = result.theta_d[..., sel].reshape(-1, sel.size)
        gamma = result.include.reshape(-1, sel.size).astype(bool)
        p_positive = (coef > 0).mean(axis=0)
        if not point_mass:
            return np.full(sel.size, np.nan), p_positive, coef.mean(axis=0)
        conditional = getattr(result, "include_probability", None)
        p_include = gamma.mean(axis=0) if conditional is None else conditional.reshape(-1, sel.size).mean(axis=0)
        with np.errstate(invalid="ignore"):
            mean_if = np.where(gamma.any(axis=0), (coef * gamma).sum(axis=0) / gamma.sum(axis=0), np.nan)
            if conditional is not None:
                share_positive = np.where(gamma.any(axis=0), (coef > 0).sum(axis=0) / gamma.sum(axis=0), 0.0)
                p_positive = p_include * share_positive
        return p_include, p_positive, mean_if

    def _flat(self) -> tuple[np.ndarray, np.ndarray]:
        r = self.result
        total = r.chains * r.draws
        return r.theta_d.reshape(total, r.theta_d.shape[-1]), r.theta_b.reshape((total,) + r.theta_b.shape[2:])

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        theta_d, theta_b = self._flat()
        return theta_d.mean(axis=0), theta_b.mean(axis=0)

    def variances(self) -> tuple[np.ndarray, np.ndarray]:
        theta_d, theta_b = self._flat()
        return theta_d.var(axis=0, ddof=1), theta_b.var(axis=0, ddof=1)

    def fixed_cov(self, p: int) -> np.ndarray:
        theta_d, _ = self._flat()
        return np.atleast_2d(np.cov(theta_d[:, :p], rowvar=False))

    def component_means(self) -> list[np.ndarray]:
        return [c.mean(axis=(0, 1)) for c in self.result.components]

    def expected_precision(self, c: int) -> np.ndarray:
        """``E[Sigma_c^-1]`` over every draw."""
        draws = self.result.components[c]
        return np.linalg.inv(draws.reshape((-1,) + draws.shape[2:])).mean(axis=0)

    def component_law(self, c: int) -> ComponentLaw:
        """The chains' draws of component ``c``."""
        draws = self.result.components[c]
        return discrete_law(draws.reshape((-1,) + draws.shape[2:]))

    def _per_row(self, D, codes, values, reduce) -> list[np.ndarray]:
        """Apply ``reduce`` to ``f`` draws in row chunks (at most ~4 million values at a time)."""
        theta_d, theta_b = self._flat()
        n = D.shape[0]
        step = max(1, VALUES_AT_ONCE // max(1, theta_d.shape[0]))
        parts = []
        for start in range(0, n, step):
            rows = slice(start, min(n, start + step))
            sub_codes = None if codes is None else codes[rows]
            sub_values = None if values is None else values[rows]
            parts.append(reduce(predictor_draws(theta_d, theta_b, D[rows], sub_codes, sub_values)))
        return parts

    def link(self, D, codes, values, training: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (``ddof=1``) of ``f`` over the draws, row by row: from the draws' covariances where that
        is the cheaper way (:meth:`_link_from_covariances`), else from each draw's ``f``."""
        theta_d, theta_b = self._flat()
        S, q = theta_d.shape
        blocked = codes is not None and theta_b.size > 0
        J, K = theta_b.shape[1:] if blocked else (0, 0)
        n = D.shape[0]
        if S > 1 and not sp.issparse(D) and J * K * q + q * q < n * (q + K):
            return self._link_from_covariances(D, codes if blocked else None, values, theta_d, theta_b)
        parts = self._per_row(D, codes, values, lambda f: np.stack([f.mean(axis=0), f.var(axis=0, ddof=1)]))
        both = np.concatenate(parts, axis=1)
        return both[0], both[1]

    @staticmethod
    def _link_from_covariances(D, codes, values, theta_d, theta_b) -> tuple[np.ndarray, np.ndarray]:
        """``f_i = d_i' theta_d + z_i' theta_j`` is linear in the draws, so its mean is ``f`` at the draws' means and
        its variance over the draws is ``d' C_dd d + 2 z' C_jd d + z' C_jj z`` with the draws' covariances (the same
        sums as the variance of each draw's ``f``, regrouped): ``O(S (q^2 + J K q))`` once instead of ``O(S n (q +
        K))``; on toenail's 10,000 draws of 1,908 rows about a tenth of the time."""
        S = theta_d.shape[0]
        centred_d = theta_d - theta_d.mean(axis=0)
        cov_dd = centred_d.T @ centred_d / (S - 1)
        mean = D @ theta_d.mean(axis=0)
        spread = D @ cov_dd
        var = np.einsum("ij,ij->i", spread, D)
        if codes is None:
            return mean, var
        J, K = theta_b.shape[1:]
        seen = codes >= 0
        z = np.where(seen[:, None], values, 0.0)
        idx = np.where(seen, codes, 0)
        mean_b = theta_b.mean(axis=0)
        cov_bd, cov_bb = np.empty((J, K, D.shape[1])), np.empty((J, K, K))  # Cov(theta_jk, theta_d), Cov(theta_j)
        step = max(1, VALUES_AT_ONCE // max(1, S * K))  # levels at a time (a copy of their draws)
        for start in range(0, J, step):
            levels = slice(start, min(J, start + step))
            centred = theta_b[:, levels] - mean_b[levels]
            count = centred.shape[1]
            cov_bd[levels] = (centred.reshape(S, count * K).T @ centred_d / (S - 1)).reshape(count, K, -1)
            cov_bb[levels] = np.einsum("sjk,sjl->jkl", centred, centred) / (S - 1)
        mean = mean + np.einsum("nk,nk->n", z, mean_b[idx])
        rows_at_once = max(1, VALUES_AT_ONCE // max(1, K * D.shape[1]))  # (a chunk's gathered covariances)
        for start in range(0, D.shape[0], rows_at_once):
            rows = slice(start, start + rows_at_once)
            zr, ir = z[rows], idx[rows]
            var[rows] += 2.0 * np.einsum("nk,nkq,nq->n", zr, cov_bd[ir], D[rows])
            var[rows] += np.einsum("nk,nkl,nl->n", zr, cov_bb[ir], zr)
        return mean, np.maximum(var, 0.0)

    def probability(self, D, codes, values) -> np.ndarray:
        """Posterior mean of ``p(+1 | f)`` over the draws (exact Monte Carlo average)."""
        return np.concatenate(self._per_row(D, codes, values, lambda f: pseudo_probability(f).mean(axis=0)))

    def draws(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        r = self.result
        return r.theta_d, r.theta_b, list(r.components)


class ModePosterior(PosteriorView):
    """A posterior mode (EM / ECME): point values, no spread."""

    kind = "mode"
    point = True
    result: EMResult

    def __init__(self, result: EMResult):
        self.result = result

    def inclusion(self, sel: np.ndarray, point_mass: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A lasso mode's slopes ``sel``: included (1) where the mode is non-zero, 0 where it is exactly 0; model
        scale."""
        coef = self.result.coef[sel]
        return (coef != 0).astype(float), (coef > 0).astype(float), np.where(coef != 0, coef, np.nan)

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        return self.result.theta_d, self.result.theta_b

    def variances(self) -> tuple[np.ndarray, np.ndarray]:
        return np.full(self.result.theta_d.shape, np.nan), np.full(self.result.theta_b.shape, np.nan)

    def fixed_cov(self, p: int) -> np.ndarray:
        return np.full((p, p), np.nan)

    def component_means(self) -> list[np.ndarray]:
        return list(self.result.components)

    def expected_precision(self, c: int) -> np.ndarray:
        """The inverse of the mode of ``Sigma_c``."""
        return np.linalg.inv(np.asarray(self.result.components[c], dtype=float))

    def component_law(self, c: int) -> ComponentLaw:
        """The mode of component ``c`` as a point mass."""
        return discrete_law(np.asarray(self.result.components[c], dtype=float)[None], np.ones(1))

    def link(self, D, codes, values, training: bool = False) -> tuple[np.ndarray, np.ndarray]:
        f = predictor_draws(self.result.theta_d[None], self.result.theta_b[None], D, codes, values)[0]
        return f, np.zeros_like(f)

    def probability(self, D, codes, values) -> np.ndarray:
        """Plug-in ``p(+1 | f)`` at the mode."""
        return pseudo_probability(self.link(D, codes, values)[0])

    def draws(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """The mode as a single draw of a single chain."""
        r = self.result
        return r.theta_d[None, None], r.theta_b[None, None], [c[None, None] for c in r.components]


class MixturePosterior(PosteriorView):
    """A weighted mixture of Gaussians over grid nodes of ``log sigma^2`` (``vb="accurate"``)."""

    kind = "mixture"
    approximate = True
    over_nodes = True
    result: IntegratedResult

    def __init__(self, result: IntegratedResult):
        self.result = result

    def inclusion(self, sel: np.ndarray, point_mass: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each slope's tilted distribution averaged over the nodes (the accurate fit of a selection prior); NaN
        ``p_include`` without a point mass; model scale."""
        slopes = self.result.slopes
        p_include = slopes.p_include if point_mass else np.full(sel.size, np.nan)
        return p_include, slopes.p_positive, slopes.mean_if_included

    def _pairs(self):
        return zip(self.result.weights, self.result.thetas)

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        mean_d = sum(w * th.mean_d for w, th in self._pairs())
        mean_b = sum(w * th.mean_b for w, th in self._pairs())
        return mean_d, mean_b

    def variances(self) -> tuple[np.ndarray, np.ndarray]:
        mean_d, mean_b = self.means()
        second_d = sum(w * (th.variance() + th.mean_d**2) for w, th in self._pairs())
        if mean_b.size:
            second_b = sum(w * (np.diagonal(th.cov_b, axis1=1, axis2=2) + th.mean_b**2) for w, th in self._pairs())
        else:
            second_b = np.zeros_like(mean_b)
        return second_d - mean_d**2, second_b - mean_b**2

    def fixed_cov(self, p: int) -> np.ndarray:
        return self.result.fixed_moments(p)[1]

    def component_means(self) -> list[np.ndarray]:
        if not self.result.has_component:
            return []
        return [np.tensordot(self.result.weights, cov, axes=1) for cov in self.result.covariances]

    def expected_precision(self, c: int) -> np.ndarray:
        """``E[Sigma_c^-1]`` over the nodes of the variance parameters."""
        return np.tensordot(self.result.weights, np.linalg.inv(self.result.covariances[c]), axes=1)

    def component_law(self, c: int) -> ComponentLaw:
        """The hyperparameter nodes' values of component ``c`` with their weights."""
        return discrete_law(self.result.covariances[c], self.result.weights)

    def link(self, D, codes, values, training: bool = False) -> tuple[np.ndarray, np.ndarray]:
        pattern = prediction_pattern(D, codes, self.result.thetas)
        parts = [(w, *th.predictor(D, codes, values, pattern)) for w, th in self._pairs()]
        mean = sum(w * m for w, m, _ in parts)
        second = sum(w * (v + m**2) for w, m, v in parts)
        return mean, second - mean**2

    def probability(self, D, codes, values) -> np.ndarray:
        pattern = prediction_pattern(D, codes, self.result.thetas)
        mixture = sum(
            w * gaussian_average_probability(*th.predictor(D, codes, values, pattern)) for w, th in self._pairs()
        )
        return np.clip(mixture, 0.0, 1.0)  # the weights sum to 1 up to rounding

    def draws(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Draws from the mixture: a node by its weight, then theta from that node's Gaussian."""
        theta_d, theta_b, covariances = self.result.sample(rng, size)
        return theta_d[None], theta_b[None], [cov[None] for cov in covariances]


class SelectionPosterior(PosteriorView):
    """Laplace-zero VB (Alg. 3): effective coefficients ``c = g o theta`` with ``q(theta) q(gamma)``.

    Means and covariances are the model averages ``E_q[c] = g o mu`` and
    ``E_q[c c'] = Omega_g o E_q[theta theta']``; the predictive probability treats ``f`` as Gaussian with
    those two moments (``f`` is a mixture over ``gamma``; its first two moments are exact).
    """

    kind = "variational"
    approximate = True
    gaussian_link = True
    result: SelectionVBResult

    def __init__(self, result: SelectionVBResult):
        self.result = result

    def inclusion(self, sel: np.ndarray, point_mass: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``q(gamma)``'s inclusion probabilities of the slopes ``sel``, ``p_positive = p_include Phi(mu / sd)`` from the
        Gaussian factor, and its mean; NaN ``p_include`` where the prior has no point mass (Gaussian q, the lasso's);
        model scale."""
        from scipy.stats import norm

        result = self.result
        mean, sd = result.mean[sel], np.sqrt(np.diag(result.cov)[sel])
        p_positive = result.p_include * norm.cdf(mean / sd)
        return (result.p_include if point_mass else np.full(sel.size, np.nan)), p_positive, mean

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        return self.result.coef_mean, np.zeros((0, 0))

    def variances(self) -> tuple[np.ndarray, np.ndarray]:
        return np.diag(self.fixed_cov(self.result.mean.size)).copy(), np.zeros((0, 0))

    def fixed_cov(self, p: int) -> np.ndarray:
        mean = self.result.coef_mean
        return (self.result.second_moment - np.outer(mean, mean))[:p, :p]

    def component_means(self) -> list[np.ndarray]:
        return [post.expected_covariance() for post in self.result.components]

    def expected_precision(self, c: int) -> np.ndarray:
        """``E[Sigma_c^-1]`` under ``q``."""
        return self.result.components[c].expected_precision()

    def component_law(self, c: int) -> ComponentLaw:
        """``q`` of random-effect term ``c``: inverse gamma (1 x 1) or inverse Wishart."""
        post = self.result.components[c]
        return ComponentLaw("inverse_wishart", shape=float(post.shape), scale=np.asarray(post.scale, dtype=float))

    def link_mean(self, D, codes, values) -> np.ndarray:
        D = D.toarray() if sp.issparse(D) else D
        mean_c = self.result.coef_mean
        return D[:, : mean_c.size] @ mean_c

    def link(self, D, codes, values, training: bool = False) -> tuple[np.ndarray, np.ndarray]:
        D = D.toarray() if sp.issparse(D) else D
        mean_c = self.result.coef_mean
        q = mean_c.size
        mean = D[:, :q] @ mean_c
        second = np.einsum("ij,ij->i", D[:, :q] @ self.result.second_moment, D[:, :q])
        return mean, np.maximum(second - mean**2, 0.0)

    def probability(self, D, codes, values) -> np.ndarray:
        return gaussian_average_probability(*self.link(D, codes, values))

    def draws(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """``gamma ~ Bernoulli(mu_gamma)`` and ``theta ~ q(theta)``, independently; effective coefficients."""
        coef, _ = self.result.sample(rng, size)
        return coef[None], np.zeros((1, size, 0, 0)), _component_draws(self.result.components, rng, size)


#: The view of each output form an engine declares (``posterior_form``, the engines' output contract).
VIEWS: dict[str, type[PosteriorView]] = {
    "variational": VariationalPosterior,
    "sampled": SampledPosterior,
    "mode": ModePosterior,
    "mixture": MixturePosterior,
    "selection": SelectionPosterior,
}


def posterior_view(result) -> PosteriorView:
    """The summaries of an engine's output, chosen by the form it declares (never by which engine ran)."""
    form = result.posterior_form
    if form not in VIEWS:
        raise TypeError(f"{type(result).__name__} declares no posterior form of {sorted(VIEWS)}")
    return VIEWS[form](result)
