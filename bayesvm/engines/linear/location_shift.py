"""The location shift between a random-effect term and the fixed effects that carry its mean: hierarchical
centring as one exact Gibbs move (Gelfand, Sahu & Carlin 1995; Liu & Sabatti 2000, Theorem 1), for every term.

A random-effect term of ``k`` columns contributes ``sum_j z_ij' u_j`` to row ``i``'s predictor (``u_j`` the effects of
level ``j``).  Where a fixed-effect column ``x_l`` equals the sum over levels of the term's column ``k_l``
(``x_il = sum_j z_ij,k_l``: the intercept for ``(1 | g)`` and for ``(1 + x | g)``, ``x`` for ``(1 + x | g)``), the
move ``beta_l -> beta_l + delta_l``, ``u_j,k_l -> u_j,k_l - delta_l`` for every level leaves every ``f_i`` unchanged.
Only the priors see ``delta`` (``m`` entries, one per such column; ``P`` embeds them among the ``k`` coordinates):

    log pi(delta) = -(beta_L + delta)' Lambda (beta_L + delta) / 2 - sum_j (u_j - P delta)' Q (u_j - P delta) / 2,

``Q = Sigma^-1`` and ``Lambda = diag(lambda_l)`` the locations' prior precisions (a fixed normal prior, or the
learned penalty's ``1 / sigma_u^2`` for a penalised slope).  That is ``N(M^-1 b, M^-1)`` with

    M = Lambda + J P'QP,    b = P'Q sum_j u_j - Lambda beta_L.

The translation group's Haar measure is Lebesgue and its Jacobian 1, so drawing ``delta`` from this conditional
leaves the posterior invariant (Liu & Sabatti's generalised Gibbs step); no row is visited.  Given the
augmentation weights the sampler's joint draw of ``(beta, u)`` moves the two only as far as the weights let them, so
where the levels are many and each says little the mean of the ``u_j`` and ``beta_L`` crawl together.

A column that changes between iterations (imputed) is never a location; neither is a column with an inclusion
indicator (the selection samplers give such columns precision 0, which excludes them).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy import linalg

from ...linalg.dense import spd_inverse


class TermShift:
    """One term's shift: component ``c``, its coordinates ``coordinates`` (``(m,)``) and their location columns of
    ``theta_d`` (``locations``, ``(m,)``); ``penalised[l]`` when location ``l``'s prior variance is the learned
    penalty's (component ``penalty``)."""

    def __init__(self, c: int, coordinates: np.ndarray, locations: np.ndarray, penalised: np.ndarray, penalty):
        self.c, self.coordinates, self.locations = c, coordinates, locations
        self.penalised, self.penalty = penalised, penalty


def _dense_column(D, j: int) -> np.ndarray:
    column = D[:, j]
    return np.asarray(column.todense()).ravel() if sp.issparse(column) else np.asarray(column, dtype=float)


def _term_column_sums(problem, comp) -> list[np.ndarray]:
    """For each coordinate ``k`` of a term, ``x_i = sum_j z_ij,k``: the term's column summed over its levels."""
    if comp.blocked:
        blocked = problem.blocked
        inside = blocked.codes >= 0
        return [np.where(inside, blocked.values[:, int(comp.index[0, k])], 0.0) for k in range(comp.k)]
    out = []
    for k in range(comp.k):
        block = problem.D[:, comp.index[:, k]]
        out.append(np.asarray(block.sum(axis=1)).ravel())
    return out


def term_shifts(problem, varying_columns: np.ndarray | None = None) -> list[TermShift]:
    """The shifts of a problem's random-effect terms (the learned penalty is not one): for each term the coordinates
    whose summed column is a fixed-effect column with a normal prior (module docstring)."""
    varying = set() if varying_columns is None else set(np.asarray(varying_columns).ravel().tolist())
    precision = np.asarray(problem.fixed_precision, dtype=float)
    candidate = precision > 0
    penalised = np.zeros(candidate.size, dtype=bool)
    penalty = None
    for comp in problem.components:
        if not comp.blocked:
            candidate[comp.index.ravel()] = False
    for c, comp in enumerate(problem.components):
        if comp.source < 0 and not comp.blocked and comp.k == 1:
            penalty = c
            penalised[comp.index.ravel()] = True
    candidate |= penalised
    for j in varying:
        candidate[j] = penalised[j] = False
    columns = {j: _dense_column(problem.D, j) for j in np.flatnonzero(candidate)}
    shifts = []
    for c, comp in enumerate(problem.components):
        if comp.source < 0:
            continue
        coordinates, locations = [], []
        for k, summed in enumerate(_term_column_sums(problem, comp)):
            for j, column in columns.items():
                if j not in locations and np.array_equal(column, summed):
                    coordinates.append(k)
                    locations.append(j)
                    break
        if locations:
            locations = np.array(locations, dtype=np.intp)
            shifts.append(TermShift(c, np.array(coordinates, dtype=np.intp), locations, penalised[locations], penalty))
    return shifts


def effects(comp, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
    """The ``(J, k)`` random effects of a term (a view of ``theta_b`` when blocked, else a copy from ``theta_d``)."""
    if comp.blocked:
        return theta_b[:, comp.index[0]]
    return theta_d[comp.index]


def shift(problem, term: TermShift, theta_d, theta_b, covs, rng: np.random.Generator) -> None:
    """Draw ``delta`` from its conditional (module docstring) and move ``beta_L`` and the term's effects by it, in
    place; the predictor is unchanged."""
    comp = problem.components[term.c]
    if comp.k == 1 and comp.blocked:  # a random intercept (every iteration): the same draw in scalars
        _shift_blocked_intercept(problem, term, comp, theta_d, theta_b, covs, rng)
    else:
        _shift_term(problem, term, comp, theta_d, theta_b, covs, rng)


def _shift_term(problem, term: TermShift, comp, theta_d, theta_b, covs, rng: np.random.Generator) -> None:
    """:func:`shift` for any term."""
    u = effects(comp, theta_d, theta_b)
    lam = np.asarray(problem.fixed_precision, dtype=float)[term.locations].copy()
    if term.penalty is not None:
        lam[term.penalised] = 1.0 / float(covs[term.penalty][0, 0])
    Q = spd_inverse(covs[term.c])
    K = term.coordinates
    precision = np.diag(lam) + comp.n_levels * Q[np.ix_(K, K)]
    rhs = (Q @ u.sum(axis=0))[K] - lam * theta_d[term.locations]
    if K.size == 1:  # a scalar: the random intercept's shift, every iteration
        delta = (rhs + np.sqrt(precision[0]) * rng.standard_normal(1)) / precision[0]
    else:
        factor = linalg.cholesky(precision, lower=True)
        mean = linalg.cho_solve((factor, True), rhs)
        delta = mean + linalg.solve_triangular(factor, rng.standard_normal(K.size), lower=True, trans="T")
    theta_d[term.locations] += delta
    moved = u.copy()
    moved[:, K] -= delta
    if comp.blocked:
        theta_b[:, comp.index[0]] = moved
    else:
        theta_d[comp.index] = moved


def _shift_blocked_intercept(problem, term: TermShift, comp, theta_d, theta_b, covs, rng: np.random.Generator) -> None:
    """:func:`shift` for a single-column blocked term (one location, ``Q = 1 / sigma^2``), on the same random number."""
    location, column = int(term.locations[0]), int(comp.index[0, 0])
    lam = float(problem.fixed_precision[location])
    if term.penalty is not None and term.penalised[0]:
        lam = 1.0 / float(covs[term.penalty][0, 0])
    inverse_variance = 1.0 / float(covs[term.c][0, 0])
    u = theta_b[:, column]
    precision = lam + comp.n_levels * inverse_variance
    rhs = inverse_variance * float(u.sum()) - lam * float(theta_d[location])
    delta = (rhs + np.sqrt(precision) * float(rng.standard_normal(1)[0])) / precision
    theta_d[location] += delta
    theta_b[:, column] = u - delta
