"""Moves of a random intercept nested in another (``(1 | site) + (1 | site:patient)``, lme4's
``(1 | site/patient)``): both variances with the outer effects integrated out, then the outer effects, with every
prediction held fixed (hierarchical centring, Gelfand, Sahu & Carlin 1995, made a partially collapsed Gibbs step,
van Dyk & Park 2008).

Every row of inner level ``b`` lies in outer level ``l = parent(b)``, and both terms add their effect with the same
value on each row (``1``: two random intercepts), so the predictor sees only the totals ``w_b = v_l + u_b``.  In the
coordinates ``(v, w)`` (Jacobian 1) the likelihood depends on ``w`` alone, and given ``w`` and the rest

    p(s_o, s_i, v | w) ∝ p(s_o) p(s_i) prod_l N(v_l; 0, s_o) prod_{b in l} N(w_b - v_l; 0, s_i),

``s_o, s_i`` the outer and inner variances.  With ``v`` integrated out each outer level's totals are
``N(0, s_i I + s_o 11')``, whose log density is (``n_l`` inner levels in ``l``, ``T_l`` and ``S_l`` the sum and the sum of
squares of their ``w_b``)

    -((n_l - 1) log s_i + log(s_i + n_l s_o) + (S_l - s_o T_l^2 / (s_i + n_l s_o)) / s_i) / 2  (+ const),

(the matrix determinant lemma and Sherman-Morrison).  Each iteration: ``log s_o`` then ``log s_i`` by one slice update
(Neal 2003) each of this marginal times their priors (the half-t prior's auxiliary variable integrated out and drawn
afresh after, as in :mod:`bayesvm.engines.linear.collapsed_variance`; inner levels without rows add their own
``N(u_b; 0, s_i)``), then ``v_l | w, s`` from ``N(T_l / s_i / P_l, 1 / P_l)``, ``P_l = 1 / s_o + n_l / s_i``, and
``u_b = w_b - v_l``.  The two variance updates leave ``p(s_o, s_i | w)`` invariant and ``v`` is drawn exactly given
them, so the whole is an exact update of the block ``(s_o, s_i, v, u)`` at fixed ``w``; ``f`` never changes and no row is
visited (``O(levels)``).

Why: given ``v`` the outer variance sits in a funnel, and given the augmentation weights the sampler moves ``v`` and
``u`` only as far as the weights let them; integrating ``v`` out given ``w`` frees ``s_o`` (its mixing is measured by
``benchmarks/gibbs_mixing.py --nested``).

Only random intercepts (the terms' values 1 on every row they cover) of single-column, uncorrelated terms whose levels
own their rows (:func:`bayesvm.engines.linear.collapsed_variance.eligible_terms`), and only where the two terms cover
the same rows."""

from __future__ import annotations

import numpy as np

from .. import variance_prior
from .interweave import LOG_VARIANCE_RANGE, LOG_VARIANCE_WIDTH, SLICE_STEPS, slice_sample_drawn


class NestedIntercepts:
    """The moves of the inner term ``inner`` (a ``TermRows``) against the outer term ``outer`` it is nested in;
    ``parent[b]`` is the outer level of inner level ``b`` (``-1`` for a level with no rows)."""

    def __init__(self, outer, inner, parent: np.ndarray):
        self.outer, self.inner, self.parent = outer, inner, parent
        self.has_rows = np.flatnonzero(parent >= 0)
        self.no_rows = np.flatnonzero(parent < 0)
        self.members = parent[self.has_rows]
        self.children = np.bincount(self.members, minlength=outer.n_levels).astype(float)

    def __call__(self, problem, theta_d: np.ndarray, theta_b: np.ndarray, covs, aux, rng: np.random.Generator) -> None:
        """Both variances given the totals ``w`` (the outer effects integrated out), then the outer effects given
        them (module docstring); in place."""
        outer_comp, inner_comp = problem.components[self.outer.c], problem.components[self.inner.c]
        v, u = _effects(self.outer, theta_d, theta_b), _effects(self.inner, theta_d, theta_b)
        w = u[self.has_rows] + v[self.members]
        totals = np.bincount(self.members, weights=w, minlength=self.outer.n_levels)
        squares = float(w @ w)
        free = u[self.no_rows]
        free_squares, n_free = float(free @ free), free.size
        n_children = float(self.has_rows.size)
        present = self.children > 0
        n_sites, site_totals = self.children[present], totals[present] ** 2

        def log_marginal(s_o: float, s_i: float) -> float:
            # sum over outer levels of log N(w_l; 0, s_i I + s_o 11'), constants dropped
            spread = s_i + n_sites * s_o
            log_det = (n_children - n_sites.size) * np.log(s_i) + float(np.sum(np.log(spread)))
            quadratic = (squares - s_o * float(np.sum(site_totals / spread))) / s_i
            return -0.5 * (log_det + quadratic) - 0.5 * (n_free * np.log(s_i) + free_squares / s_i)

        s_o, s_i = float(covs[self.outer.c][0, 0]), float(covs[self.inner.c][0, 0])
        outer_prior = variance_prior.log_density_of_log_variance(outer_comp)
        inner_prior = variance_prior.log_density_of_log_variance(inner_comp)
        exponentials, uniforms = rng.exponential(size=2), rng.random((2, SLICE_STEPS + 1))
        t = slice_sample_drawn(
            lambda x: _bounded(x) + outer_prior(x) + log_marginal(np.exp(x), s_i), np.log(s_o), LOG_VARIANCE_WIDTH,
            exponentials[0], uniforms[0],
        )  # fmt: skip
        s_o = float(np.exp(t))
        t = slice_sample_drawn(
            lambda x: _bounded(x) + inner_prior(x) + log_marginal(s_o, np.exp(x)), np.log(s_i), LOG_VARIANCE_WIDTH,
            exponentials[1], uniforms[1],
        )  # fmt: skip
        s_i = float(np.exp(t))
        precision = 1.0 / s_o + self.children / s_i
        v = totals / s_i / precision + rng.standard_normal(self.outer.n_levels) / np.sqrt(precision)
        u = u.copy()
        u[self.has_rows] = w - v[self.members]
        _set_effects(self.outer, theta_d, theta_b, v)
        _set_effects(self.inner, theta_d, theta_b, u)
        covs[self.outer.c], covs[self.inner.c] = np.array([[s_o]]), np.array([[s_i]])
        aux[self.outer.c] = variance_prior.draw_auxiliary(outer_comp, s_o, rng)
        aux[self.inner.c] = variance_prior.draw_auxiliary(inner_comp, s_i, rng)


def _bounded(t: float) -> float:
    """0 inside the range of ``log sigma^2`` the collapsed steps allow, ``-inf`` outside (``exp`` overflows)."""
    return 0.0 if LOG_VARIANCE_RANGE[0] < t < LOG_VARIANCE_RANGE[1] else -np.inf


def _effects(term, theta_d: np.ndarray, theta_b: np.ndarray) -> np.ndarray:
    return theta_b[:, term.column].copy() if term.blocked else theta_d[term.column].copy()


def _set_effects(term, theta_d: np.ndarray, theta_b: np.ndarray, values: np.ndarray) -> None:
    if term.blocked:
        theta_b[:, term.column] = values
    else:
        theta_d[term.column] = values


def _row_codes(term, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row's level of ``term`` (``-1``: none) and the term's value there (``0``: none)."""
    rows = np.arange(n) if term.rows is None else np.asarray(term.rows)
    codes, values = np.full(n, -1, dtype=np.intp), np.zeros(n)
    codes[rows], values[rows] = term.codes, term.values
    return codes, values


def nested_intercepts(problem, terms) -> list[NestedIntercepts]:
    """One :class:`NestedIntercepts` for each ordered pair of random intercepts among ``terms`` (``TermRows`` of
    :func:`bayesvm.engines.linear.collapsed_variance.eligible_terms`) where every level of the second lies in one
    level of the first and the two cover the same rows (a pair whose levels coincide one to one gets one shift)."""
    n = problem.y.shape[0]
    coded = [_row_codes(term, n) for term in terms]
    shifts = []
    for a, outer in enumerate(terms):
        for b, inner in enumerate(terms):
            if a == b or inner.n_levels < outer.n_levels:
                continue
            (outer_codes, outer_values), (inner_codes, inner_values) = coded[a], coded[b]
            covered = inner_codes >= 0
            if not np.array_equal(covered, outer_codes >= 0) or not covered.any():
                continue
            if not (np.all(outer_values[covered] == 1.0) and np.all(inner_values[covered] == 1.0)):
                continue
            parent = np.full(inner.n_levels, -1, dtype=np.intp)
            parent[inner_codes[covered]] = outer_codes[covered]
            if not np.array_equal(parent[inner_codes[covered]], outer_codes[covered]):
                continue  # an inner level spans two outer levels: crossed, not nested
            if inner.n_levels == outer.n_levels and a > b and any(s.outer is inner for s in shifts):
                continue  # the same partition twice: one shift is enough
            shifts.append(NestedIntercepts(outer, inner, parent))
    return shifts
