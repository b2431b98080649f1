"""Swap moves between correlated slopes for the selection Gibbs samplers.

The single-site updates of :mod:`bayesvm.engines.selection.gibbs` draw each indicator given the
augmentation ``omega``.  ``omega_i`` is drawn from the current fit's margins, so it remembers which of two
correlated predictors carries the signal: a chain that chose ``x_j`` keeps it, and another chain that chose
its near-copy ``x_k`` keeps that (on spam four chains split 3:1 between two such columns; R-hat 29).

A **swap** moves the signal from an included slope ``j`` to an excluded slope ``k`` in one step, on the
posterior with the augmentation integrated out -- the hinge pseudo-likelihood
``L(f) = exp(-2 sum_i max(0, 1 - y_i f_i))`` itself -- so ``omega`` cannot veto it:

* proposal: ``j`` uniform over the included slopes, ``k`` over the excluded ones with probability
  ``w_jk / sum_{l excluded} w_jl``, ``w_jk = |corr(x_j, x_k)| + 0.01`` (every pair possible);
* values: ``c_k' = s c_j`` and (Laplace-zero, whose excluded slopes keep a value ``v``) ``v_j' = s v_k``, with
  ``s = sign corr(x_j, x_k)``.  The map is its own inverse with unit Jacobian;
* acceptance: ``min(1, L(f') p(c') / (L(f) p(c)) * q(reverse) / q(forward))``, with
  ``f' = f + x_k c_k' - x_j c_j``, the slopes' marginal prior ``p`` (the Laplace-zero ``b_k`` integrated
  out, so ``p(v) = Laplace(0, sigma s_k)``; the slab ``N(0, nu^2 s_k^2)``), ``p(gamma)`` unchanged (a swap
  keeps the model size) and ``q(reverse) / q(forward) = sum_{l excl} w_jl / sum_{l excl'} w_kl``.

A move on the marginal of ``(gamma, coefficients, sigma^2)`` keeps the joint posterior when what was
integrated out is drawn afresh from its conditional afterwards: the sampler redraws every ``b_k`` (for
Laplace-zero) and then ``omega`` right after the swaps.  ``tests/engines/selection/test_moves.py``
checks the sampler with the moves against exact enumeration of the models on a small problem.
"""

from __future__ import annotations

import numpy as np

#: Added to every ``|corr|`` so that any excluded slope can be proposed.
WEIGHT_FLOOR = 0.01


def swap_weights(X: np.ndarray, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(w, s)``: proposal weights ``|corr| + WEIGHT_FLOOR`` (zero diagonal) and signs of the correlations
    between the penalised columns."""
    cols = X[:, selected]
    centred = cols - cols.mean(axis=0)
    norms = np.sqrt(np.einsum("ij,ij->j", centred, centred))
    norms[norms == 0.0] = 1.0
    corr = (centred.T @ centred) / np.outer(norms, norms)
    weights = np.abs(corr) + WEIGHT_FLOOR
    np.fill_diagonal(weights, 0.0)
    signs = np.where(corr < 0.0, -1.0, 1.0)
    return weights, signs


def weighted_lines(y: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray | float, np.ndarray]:
    """``(unit, signed)`` for the moves that follow the hinge along a line, ``margin_i = unit_i - signed_i f_i`` and
    slope ``signed_i x_ik``: ``(1, y)`` without class weights, ``(omega, omega y)`` with them, since
    ``omega_i max(0, 1 - y_i f_i) = max(0, omega_i - omega_i y_i f_i)`` (:mod:`bayesvm.model.class_weights`)."""
    if weights is None:
        return 1.0, y
    unit = np.asarray(weights, dtype=float)
    return unit, unit * y


def hinge_log_likelihood(y: np.ndarray, f: np.ndarray, weights: np.ndarray | None = None) -> float:
    """``log L(f) = -2 sum_i omega_i max(0, 1 - y_i f_i)`` (``omega`` the rows' class weights, 1 where None)."""
    hinge = np.maximum(0.0, 1.0 - y * f)
    return -2.0 * float(np.sum(hinge if weights is None else weights * hinge))


class SwapMoves:
    """Metropolis-Hastings swaps on a selection sampler's state (module docstring).

    The sampler's step object supplies ``gamma`` (``(m,)`` 0/1), ``swap_log_prior(j, k, sign, coef)``
    (log prior ratio of the swapped values) and ``apply_swap(j, k, sign, coef)``; positions ``j, k`` index
    the penalised slopes.
    """

    def __init__(
        self, y: np.ndarray, X: np.ndarray, selected: np.ndarray, moves: int | None = None,
        weights: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        self.y, self.X, self.selected = y, X, selected
        self.row_weights = weights  # class weights (None: every row 1)
        self.weights, self.signs = swap_weights(X, selected)
        self.moves = min(selected.size, 10) if moves is None else moves
        self.proposed = 0
        self.accepted = 0

    def run(self, step, coef: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Make ``self.moves`` swap proposals; returns the (possibly) new effective coefficients."""
        y, X, sel = self.y, self.X, self.selected
        f = X @ coef
        log_lik = hinge_log_likelihood(y, f, self.row_weights)
        uniforms = rng.random((self.moves, 3))
        for u_j, u_k, u_accept in uniforms:
            on = np.flatnonzero(step.gamma)
            off = np.flatnonzero(step.gamma == 0)
            if on.size == 0 or off.size == 0:
                break
            j = on[min(int(u_j * on.size), on.size - 1)]
            forward = self.weights[j, off]
            total_forward = forward.sum()
            k = off[min(int(np.searchsorted(np.cumsum(forward), u_k * total_forward)), off.size - 1)]
            off_after = off.copy()
            off_after[off == k] = j
            total_reverse = self.weights[k, off_after].sum()
            sign = self.signs[j, k]
            cj, ck = sel[j], sel[k]
            new_value = sign * coef[cj]
            f_new = f + X[:, ck] * new_value - X[:, cj] * coef[cj]
            log_lik_new = hinge_log_likelihood(y, f_new, self.row_weights)
            log_ratio = (
                log_lik_new - log_lik + step.swap_log_prior(j, k, sign, coef) + np.log(total_forward / total_reverse)
            )
            self.proposed += 1
            if np.log(u_accept) < log_ratio:
                step.apply_swap(j, k, sign, coef)
                coef[ck], coef[cj] = new_value, 0.0
                f, log_lik = f_new, log_lik_new
                self.accepted += 1
        return coef
