"""Mean-field variational Bayes for the linear Bayesian SVM (Luts & Ormerod 2014, Alg. 1-2).

Model, with ``C = [D, Z_b]`` and ``theta = (theta_d, theta_b)``:

* pseudo-likelihood ``exp(-2 max(0, 1 - y_i c_i' theta))`` written as the Polson-Scott
  mixture over ``a_i > 0`` (section 2.3);
* columns of ``theta`` with a fixed prior precision ``lambda_j`` (vague fixed effects,
  ``1 / sigma_beta^2``; fixed penalty ``4 alpha``, Alg. 1);
* variance components: a set of coefficients ``N(0, sigma^2)`` with ``sigma^2 ~ IG(A, B)``
  (learned penalty, Example 1; random intercepts, Example 2), or ``k``-vectors
  ``u_j ~ N(0, Sigma)`` with ``Sigma ~ IW(nu, Psi)`` (correlated random-effect terms).

Factorisation ``q(theta) prod_i q(a_i) prod_c q(component_c)`` with

* ``q(theta) = N(mu, P^{-1})``, ``P = C' W C + blockdiag(prior precisions)``, ``mu = P^{-1} C' Y (1 + w)``
  (Alg. 2 steps 2-3);
* ``q(a_i) = GIG(1/2, 1, chi_i)``, ``chi_i = (1 - y_i c_i' mu)^2 + c_i' P^{-1} c_i``, ``w_i = chi_i^{-1/2}`` (step 3);
* ``q(sigma^2) = IG(A + m/2, B + (||mu_u||^2 + tr Sigma_u) / 2)`` (step 4);
* ``q(Sigma) = IW(nu + J, Psi + sum_j E[u_j u_j'])``, ``E[Sigma^{-1}] = (nu + J) Psi_q^{-1}``
  (derived: ``E_{-Sigma} log p = -(nu + J + k + 1)/2 log|Sigma| - tr((Psi + S) Sigma^{-1})/2``).

The lower bound is ``E_q[log p(y, a, theta, components) - log q]`` with every constant
(section 2.3 and 3.1, written term by term below), evaluated after each full sweep.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ...linalg.dense import GaussianPosterior, blas_threads, gaussian_posterior
from ...linalg.probes import ProbePosterior, probe_posterior
from ...linalg.schur import SchurSparsePosterior, schur_sparse_posterior
from ...linalg.sparse import SparseGaussianPosterior, sparse_gaussian_posterior
from ...model.output import EngineOutput
from ...model.problems import VBProblem, sorted_by_level
from ..augmentation import CHI_FLOOR, data_lower_bound, inverse_a_mean, row_terms, update_chi
from ..components import (
    LOG_2PI,
    ComponentPosterior,
    component_bound,
    decode_components,
    encode_components,
    initial_component,
    prior_precisions,
    second_moments,
    sparse_prior,
    update_component,
)
from ..squarem import squarem_ascent


def sparse_posterior(
    problem: VBProblem, w: np.ndarray, rhs_weights: np.ndarray, prior: sp.spmatrix
) -> SparseGaussianPosterior | SchurSparsePosterior | ProbePosterior:
    """``q(theta)`` on the sparse path: by elimination onto a dense Schur complement where that applies,
    otherwise by the general sparse factorisation (the same distribution either way); with
    ``problem.probes``, the same mean with probe-estimated variances."""
    if problem.probes is not None:
        layout, block = problem.probe_layout
        return probe_posterior(layout, w, rhs_weights, prior, problem.probes, problem.probe_seed, block)
    if problem.elimination is not None:
        return schur_sparse_posterior(problem.elimination, w, rhs_weights, prior)
    return sparse_gaussian_posterior(problem.D, w, rhs_weights, prior)


@dataclass
class VBResult(EngineOutput):
    """Plain outputs of :func:`fit_vb`."""

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): a Gaussian q(theta) and q of each variance component.
    posterior_form: ClassVar[str] = "variational"

    theta: GaussianPosterior | SparseGaussianPosterior | SchurSparsePosterior | ProbePosterior
    components: list[ComponentPosterior]
    chi: np.ndarray
    lower_bound: np.ndarray
    converged: bool
    n_iter: int
    elapsed: float
    decreases: list[int] = field(default_factory=list)

    @property
    def probe_report(self):
        """The stochastic-probe solver's Monte Carlo report (the engine-output contract; ``None`` for exact solvers)."""
        return self.theta.report if isinstance(self.theta, ProbePosterior) else None

    @property
    def schur_columns(self) -> int:
        """Columns of the dense Schur complement the sparse solver formed (0 when it formed none)."""
        return self.theta.layout.q if isinstance(self.theta, SchurSparsePosterior) else 0


def lower_bound(
    problem: VBProblem,
    y: np.ndarray,
    theta: GaussianPosterior,
    mean_f: np.ndarray,
    expected_sq: np.ndarray,
    chi: np.ndarray,
    components: list[ComponentPosterior],
    seconds: list[np.ndarray],
    weights: np.ndarray | None = None,
) -> float:
    """``log p(y; q)``: the full lower bound, term by term (Luts & Ormerod sections 2.3, 3.1); ``weights`` are the
    rows' class weights in the order of ``y`` (None: every row 1)."""
    # E[log p(y, a | theta)] - E[log q(a)]  (section 2.3; closed form of log K_{1/2}; each row times its weight)
    total = data_lower_bound(y, mean_f, expected_sq, chi, weights)
    # E[log p(theta_j)] for fixed-precision columns: N(0, 1 / lambda_j)
    lam = problem.fixed_precision
    fixed = lam > 0
    second_fixed = theta.mean_d[fixed] ** 2 + theta.variance()[fixed]
    total += float(np.sum(0.5 * np.log(lam[fixed]) - 0.5 * LOG_2PI - 0.5 * lam[fixed] * second_fixed))
    # -E[log q(theta)]: Gaussian entropy
    total += 0.5 * theta.dim * (1.0 + LOG_2PI) - 0.5 * theta.logdet_precision
    # variance components: E[log p(u | .)] + E[log p(.)] - E[log q(.)]
    for comp, post, second in zip(problem.components, components, seconds):
        total += component_bound(comp, post, second)
    return total


@dataclass
class _Sweep:
    """One coordinate-ascent sweep's output: a complete q and its lower bound."""

    theta: GaussianPosterior | SparseGaussianPosterior | SchurSparsePosterior
    chi: np.ndarray
    components: list[ComponentPosterior]
    bound: float

    @property
    def state(self) -> tuple[np.ndarray, list[ComponentPosterior]]:
        return self.chi, self.components


class _Sweeper:
    """Alg. 2 as a map from the state ``(chi, components)`` to the next sweep (rows sorted by level)."""

    def __init__(self, problem: VBProblem):
        self.problem = problem
        self.order, sorted_problem = sorted_by_level(problem)
        self.y, self.D, self.blocked = sorted_problem.y, sorted_problem.D, sorted_problem.blocked
        self.weights = sorted_problem.weights  # class weights (None: every row 1), in the sweep's row order
        self.pattern = sorted_problem.row_pattern  # (None unless the dense part is wide and mostly zero)

    def initial_state(self) -> tuple[np.ndarray, list[ComponentPosterior]]:
        """``E[1/a] = 1`` and every expected precision ``I``."""
        return np.ones(self.y.size), [initial_component(c) for c in self.problem.components]

    def subsample_state(self, tol: float, max_iter: int) -> tuple[np.ndarray, list[ComponentPosterior]] | None:
        """The state a fit of :data:`SUBSAMPLE_FRACTION` of the rows reaches, for a dense design without a blocked
        factor of at least :data:`SUBSAMPLE_FROM_ROWS` rows (else None): its ``q(theta)`` gives every row's
        ``chi_i = (1 - y_i mu_f)^2 + Var(f_i)`` (Alg. 2 step 3) and its components start as they ended.

        The sweeps from ``E[1/a] = 1`` converge linearly and slowly while ``q(theta)`` moves from the prior's scale
        to the data's; a subsample covers that distance at a fraction of the cost per sweep, and the full sweeps
        then start near the optimum.  The fixed point is the full problem's either way."""
        problem = self.problem
        if problem.is_sparse or problem.blocked is not None or self.pattern is not None:
            return None
        if problem.D.shape[0] != problem.y.size or problem.n < SUBSAMPLE_FROM_ROWS:
            return None
        rows = np.sort(np.random.default_rng(0).choice(problem.n, int(SUBSAMPLE_FRACTION * problem.n), replace=False))
        start = coordinate_ascent(problem.take(rows), tol, max_iter, accelerate=True)
        mean_f, var_f = start.theta.predictor(problem.D, None, None)
        return update_chi((1.0 - problem.y * mean_f) ** 2 + var_f), start.components

    def sweep(self, chi: np.ndarray, components: list[ComponentPosterior]) -> _Sweep:
        problem, y, D, blocked = self.problem, self.y, self.D, self.blocked
        w, rhs = row_terms(y, inverse_a_mean(chi), self.weights)
        precisions = [c.expected_precision() for c in components]
        # (1) q(theta): Alg. 2 steps 2-3; (2) q(a): chi_i = (1 - y_i mu_f)^2 + Var(f_i), step 3
        if problem.is_sparse:
            theta = sparse_posterior(problem, w, rhs, sparse_prior(problem, precisions))
            mean_f, var_f = theta.predictor(D, training=True)
        else:
            prior_dd, prior_b = prior_precisions(problem, precisions)
            theta = gaussian_posterior(D, w, rhs, prior_dd, blocked, prior_b, self.pattern)
            codes = None if blocked is None else blocked.codes
            values = None if blocked is None else blocked.values
            mean_f, var_f = theta.predictor(D, codes, values, self.pattern)
        expected_sq = (1.0 - y * mean_f) ** 2 + var_f
        chi = update_chi(expected_sq)
        # (3) variance components: Alg. 2 step 4
        seconds = [second_moments(c, theta) for c in problem.components]
        components = [update_component(c, s, p) for c, s, p in zip(problem.components, seconds, components)]
        # (4) lower bound of the complete q after the sweep
        bound = lower_bound(problem, y, theta, mean_f, expected_sq, chi, components, seconds, self.weights)
        return _Sweep(theta, chi, components, bound)

    # SQUAREM works on an unconstrained encoding of the state
    def encode(self, chi: np.ndarray, components: list[ComponentPosterior]) -> np.ndarray:
        return np.concatenate([np.log(chi), encode_components(components)])

    def decode(self, x: np.ndarray, like: list[ComponentPosterior]) -> tuple[np.ndarray, list[ComponentPosterior]]:
        n = self.y.size
        return np.maximum(np.exp(x[:n]), CHI_FLOOR), decode_components(x[n:], like)


#: A dense design without a blocked factor of at least this many rows starts from the fit of a random
#: ``SUBSAMPLE_FRACTION`` of its rows (applied again to the subsample while it is this large)
SUBSAMPLE_FROM_ROWS = 50_000
SUBSAMPLE_FRACTION = 0.2
#: A fit with an exact bound also stops only once a sweep raises it by less than this many nats: on a large design a
#: relative ``tol`` allows changes that leave the means a fifth of a posterior SD from the optimum (10^6 x 50: within
#: 0.01 SD with this floor)
ABSOLUTE_TOL = 1e-3

#: Monte Carlo error of a probe fit's bound from its variance terms, relative to the bound (measured:
#: 1e-7 to 7e-7 with 32-64 probes, on 600 to 10^6 rows).
PROBE_BOUND_RELATIVE_ERROR = 1e-6


def probe_bound_noise(theta: ProbePosterior, bound: float) -> float:
    """How far the estimated bound of a probe fit may drop between sweeps from Monte Carlo error alone: three
    standard errors of its entropy term (``log|P| / 2``) plus :data:`PROBE_BOUND_RELATIVE_ERROR`."""
    return 3.0 * 0.5 * theta.logdet_se + PROBE_BOUND_RELATIVE_ERROR * abs(bound)


def fit_vb(problem: VBProblem, tol: float = 1e-8, max_iter: int = 500, accelerate: bool = True) -> VBResult:
    """See :func:`coordinate_ascent`; runs with the BLAS threading of :func:`linalg.blas_threads`."""
    with blas_threads(problem.D.shape[1], problem.n):
        return coordinate_ascent(problem, tol, max_iter, accelerate)


def coordinate_ascent(problem: VBProblem, tol: float, max_iter: int, accelerate: bool) -> VBResult:
    """Coordinate ascent (Alg. 1 when there are no components, Alg. 2 otherwise).

    Each sweep: (1) ``q(theta)`` given ``E[1/a]`` and the components' expected precisions;
    (2) ``q(a)``; (3) each component; (4) the lower bound of the resulting q.  Stops when
    the relative increase of the bound falls below ``tol`` and below :data:`ABSOLUTE_TOL` nats (an exact bound)
    or after ``max_iter`` sweeps.

    With ``accelerate=True`` the sweeps are grouped in SQUAREM cycles with a monotone safeguard
    (:mod:`bayesvm.engines.squarem`), and a large dense design starts from a subsample's fit
    (:meth:`_Sweeper.subsample_state`); ``accelerate=False`` is the paper's plain iteration from the paper's start.
    ``n_iter`` counts every sweep of the full data computed, kept or not; ``elapsed`` includes the subsample's fit.
    """
    start = time.perf_counter()
    sweeper = _Sweeper(problem)
    initial = sweeper.subsample_state(tol, max_iter) if accelerate else None
    ascent = squarem_ascent(
        lambda state: sweeper.sweep(*state),
        lambda state: sweeper.encode(*state),
        lambda x, like: sweeper.decode(x, like[1]),
        sweeper.initial_state() if initial is None else initial,
        tol,
        max_iter,
        accelerate,
        absolute_tol=None if problem.probes else ABSOLUTE_TOL,
    )
    current = ascent.last
    decreases = ascent.decreases
    if isinstance(current.theta, ProbePosterior):  # the bound is estimated: only drops beyond its error count
        bounds = np.asarray(ascent.bounds)
        noise = probe_bound_noise(current.theta, bounds[-1])
        decreases = [k for k in decreases if bounds[k - 2] - bounds[k - 1] > noise]
    chi = current.chi
    if sweeper.order is not None:
        chi = chi[np.argsort(sweeper.order)]
    return VBResult(
        theta=current.theta,
        components=current.components,
        chi=chi,
        lower_bound=np.asarray(ascent.bounds),
        converged=ascent.converged,
        n_iter=ascent.n_sweeps,
        elapsed=time.perf_counter() - start,
        decreases=decreases,
    )
