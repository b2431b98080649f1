"""Model jumps: independence Metropolis-Hastings proposals of the whole model from the VB fit, so that a chain caught
in a far worse model gets out.

**The trap.**  The hinge pseudo-likelihood has local optima in model space that single-slope moves cannot leave.  On
mlmRev's Contraception (``use ~ age + urban + livch + (1 | district)``, Laplace-zero) the model with every slope out
puts most rows at ``f = -1``, on the margin of the larger class; adding any one slope from there lowers the
likelihood, because a slope only helps the hinge where it turns some group's majority, and no single one does.  Its
posterior probability is ``e^-42`` of the best model's (importance sampling with the random intercepts integrated
out in closed form: ``urban + livch`` 0, ``+ age`` -1.0, nothing -42.4, ``urban`` alone -46.7), yet one chain in
four fell into it during tuning (the Laplace scale shrank the slopes until they left one by one) and stayed for
every kept draw, under spike-and-slab as well.  Swaps, pair updates and exchanges each change one or two
indicators, and the trap needs four at once.

**The move.**  A proposal that does not depend on the state: each slope in with probability ``pi_k`` (the VB fit's
inclusion probability, kept within ``[JUMP_FLOOR, 1 - JUMP_FLOOR]``), an included slope's value from a Student-t
(:data:`JUMP_DF` degrees of freedom) at its VB mean with :data:`JUMP_INFLATION` times its VB standard deviation
(mean-field VB understates them), and each column with its own normal prior (the intercept; not the random
effects, which stay) from the same kind of t; an excluded Laplace-zero value ``v_k`` from its prior ``Laplace(0,
sigma s_k)`` (spike-and-slab has no value there).  It is accepted with probability

    min(1, pi(x') q(x) / pi(x) q(x')),
    log pi(x) = -2 sum_i (1 - y_i f_i)_+ + sum_k [gamma_k logit(rho) + gamma_k log slab(v_k)]
                + sum_free log N(beta_j; 0, 1 / lambda_j),

the posterior with the augmentation ``omega`` (and Laplace-zero's mixing weights ``b``) integrated out, the random
effects and variance components held (the excluded values' prior appears in both ``pi`` and ``q`` and cancels).
Independence Metropolis-Hastings keeps ``pi`` for any fixed proposal (Tierney 1994), so a poor proposal costs only
rejections; the sampler draws ``omega`` (and ``b``) afresh afterwards, as for the other moves (a partially collapsed
step: van Dyk & Park 2008).  With many slopes a proposed model rarely matches the posterior's and the move is
rejected, so it runs for at most :data:`JUMP_MAX_SLOPES` slopes: where the slopes are few and a trap can be deep.  Checked against enumeration of the models in
``tests/engines/selection/test_model_jumps.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from ..joint import log_pseudo_likelihood

#: Each slope's proposed inclusion probability is the VB fit's, kept this far from 0 and 1 (so every model can be
#: proposed: the proposal must be able to return to the current model).
JUMP_FLOOR = 0.1
#: The proposal's standard deviations are the VB fit's times this (mean-field VB understates them).
JUMP_INFLATION = 1.5
#: Degrees of freedom of the proposal's Student-t values.
JUMP_DF = 4.0
#: The jumps run for problems with at most this many slopes.  Each proposes the whole model, so the chance that it
#: proposes a model the posterior likes falls as ``(1 - JUMP_FLOOR)^m`` (0.12 at 20 slopes, 0.002 at 57)
JUMP_MAX_SLOPES = 20


@dataclass(frozen=True)
class JumpReference:
    """The proposal's fixed parameters, from a VB fit: each slope's inclusion probability and its value's mean and
    standard deviation given inclusion (``(m,)`` each), and the same for the columns with a fixed normal prior
    (``free``, their positions among the columns)."""

    include: np.ndarray
    slope_mean: np.ndarray
    slope_sd: np.ndarray
    free: np.ndarray
    free_mean: np.ndarray
    free_sd: np.ndarray

    @classmethod
    def from_vb(cls, result, selected: np.ndarray, free: np.ndarray) -> JumpReference:
        """From a :class:`~bayesvm.engines.selection.vb.SelectionVBResult` (``mean``, ``cov``, ``include``)."""
        sd = np.sqrt(np.maximum(np.diag(np.asarray(result.cov, dtype=float)), 1e-12))
        mean = np.asarray(result.mean, dtype=float)
        include = np.clip(np.asarray(result.include, dtype=float)[selected], JUMP_FLOOR, 1.0 - JUMP_FLOOR)
        return cls(include, mean[selected], sd[selected], np.asarray(free), mean[free], sd[free])


_LOG_T_CONSTANT = float(
    special.gammaln(0.5 * (JUMP_DF + 1)) - special.gammaln(0.5 * JUMP_DF) - 0.5 * np.log(JUMP_DF * np.pi)
)


def _log_t(x: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> float:
    """``sum log t_nu(x; loc, scale)`` with ``nu = JUMP_DF`` (scipy.stats.t.logpdf, without its per-call overhead)."""
    z = (x - loc) / scale
    return float(np.sum(_LOG_T_CONSTANT - np.log(scale) - 0.5 * (JUMP_DF + 1) * np.log1p(z * z / JUMP_DF)))


class ModelJumps:
    """The independence proposals of the module docstring on one chain's state (:mod:`bayesvm.engines.selection.gibbs`
    step objects: ``pair_priors``, ``apply_pairs``, ``apply_line``, ``gamma``)."""

    def __init__(self, y: np.ndarray, X: np.ndarray, selected: np.ndarray, free_precision: np.ndarray,
                 reference: JumpReference, weights: np.ndarray | None = None):  # fmt: skip
        self.y, self.X, self.selected = y, X, selected
        self.row_weights = weights  # class weights (None: every row 1)
        self.free_precision = np.asarray(free_precision, dtype=float)
        self.ref = reference
        self.proposed = self.accepted = 0

    def _log_proposal(self, gamma: np.ndarray, slopes: np.ndarray, free: np.ndarray) -> float:
        ref, on = self.ref, gamma.astype(bool)
        out = float(np.sum(np.where(on, np.log(ref.include), np.log1p(-ref.include))))
        t_slopes = _log_t(slopes[on], ref.slope_mean[on], JUMP_INFLATION * ref.slope_sd[on])
        return out + t_slopes + _log_t(free, ref.free_mean, JUMP_INFLATION * ref.free_sd)

    def _log_target(self, coef: np.ndarray, gamma: np.ndarray, priors) -> float:
        precision, inv_scale, log_odds = priors
        on = gamma.astype(bool)
        values = coef[self.selected][on]
        gaussian = precision[on] > 0  # the slab: N(0, 1 / precision), else Laplace(0, 1 / inv_scale)
        lam, inv = np.where(gaussian, precision[on], 1.0), np.where(gaussian, 1.0, inv_scale[on])
        slab = np.where(
            gaussian,
            0.5 * np.log(lam / (2 * np.pi)) - 0.5 * lam * values**2,
            np.log(0.5 * inv) - inv * np.abs(values),
        )
        free = coef[self.ref.free]
        return (
            log_pseudo_likelihood(self.y, self.X @ coef, self.row_weights)
            + float(np.sum(log_odds[on]) + np.sum(slab))
            - 0.5 * float(np.sum(self.free_precision * free**2))
        )

    def run(self, state, coef: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One proposal; returns the (possibly) new effective coefficients and updates ``state`` when accepted."""
        ref, sel = self.ref, self.selected
        priors = tuple(np.asarray(v, dtype=float) for v in state.pair_priors())
        gamma = np.asarray(state.gamma, dtype=np.int64)
        new_gamma = (rng.random(sel.size) < ref.include).astype(np.int64)
        slopes = ref.slope_mean + JUMP_INFLATION * ref.slope_sd * rng.standard_t(JUMP_DF, sel.size)
        free = ref.free_mean + JUMP_INFLATION * ref.free_sd * rng.standard_t(JUMP_DF, ref.free.size)
        proposal = coef.copy()
        proposal[sel] = np.where(new_gamma == 1, slopes, 0.0)
        proposal[ref.free] = free
        log_ratio = (
            self._log_target(proposal, new_gamma, priors)
            - self._log_target(coef, gamma, priors)
            + self._log_proposal(gamma, coef[sel], coef[ref.free])
            - self._log_proposal(new_gamma, slopes, free)
        )
        self.proposed += 1
        if np.log(rng.random()) >= log_ratio:
            return coef
        self.accepted += 1
        state.apply_pairs(new_gamma, np.where(new_gamma == 1, slopes, 0.0))
        state.apply_line(proposal)
        return proposal


def jump_reference(problem) -> JumpReference | None:
    """The proposal's parameters from the mean-field VB fit of the same selection problem (Luts & Ormerod 2014,
    Alg. 3 for Laplace-zero; :mod:`bayesvm.engines.selection.spike_slab_vb`), or None for a prior without
    indicators, for more than :data:`JUMP_MAX_SLOPES` slopes, or where the VB fit fails (the sampler then runs
    without the jumps)."""
    from ...errors import BayesvmError
    from .laws import law_of

    law = law_of(problem.prior)
    if problem.m > JUMP_MAX_SLOPES or not law.indicators:
        return None
    try:
        result = law.mean_field(problem)
    except (BayesvmError, np.linalg.LinAlgError, FloatingPointError):
        return None
    reference = JumpReference.from_vb(result, problem.selected, problem.unselected)
    finite = all(np.all(np.isfinite(v)) for v in (reference.slope_mean, reference.slope_sd, reference.free_mean,
                                                 reference.free_sd))  # fmt: skip
    return reference if finite else None
