"""The weights of an overlap certificate from a logistic fit's score equation, by Newton's method.

Stiemke's alternative (Mangasarian 1969, Thm 2.4.5) for signed design rows ``s_i``: either some direction ``d``
has ``s_i'd >= 0`` on every row and ``> 0`` on one (separation), or some ``lambda`` with every entry positive has
``sum_i lambda_i s_i = 0`` (overlap).  Where the maximum of ``l(b) = sum_i log sigma(s_i'b)`` exists (Albert &
Anderson 1984) its score equation ``sum_i sigma(-s_i'b) s_i = 0`` gives the second: ``lambda_i = sigma(-s_i'b)``.
:func:`score_weights` runs damped Newton on ``l`` (Hessian ``S' diag(lambda (1 - lambda)) S``) with backtracking
and returns those weights at the maximum, or None where the fit diverges (separated data) or a step cannot be
solved; the caller projects them onto the null space of ``S'`` and accepts them if every entry stays positive.

The design enters only through :class:`ScoreSystem`, so each test solves the Newton system on its own structure:
a dense or sparse Cholesky factor (:func:`bayesvm.checks.separation.detect_separation`) or the levels' diagonal
block eliminated (:func:`bayesvm.checks.level_overlap.one_factor_separation`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import scipy.special

#: Newton iterations of the logistic fit before it gives up (separated data: it diverges).
CERTIFICATE_ITERATIONS = 60
#: The fit is running off along a separating direction once ``l(b)`` is above this (every row's ``log sigma`` near
#: 0) or a coefficient above :data:`DIVERGED_COEFFICIENT`.
DIVERGED_OBJECTIVE = -1e-6
DIVERGED_COEFFICIENT = 1e8


class ScoreSystem(Protocol):
    """The signed rows ``S`` (``n x m``) of one test, through the three products Newton's method needs."""

    def margins(self, coef: np.ndarray) -> np.ndarray:
        """``S b`` (length ``n``)."""
        ...

    def scores(self, weights: np.ndarray) -> np.ndarray:
        """``S' lambda`` (length ``m``)."""
        ...

    def newton_step(self, curvature: np.ndarray, gradient: np.ndarray) -> np.ndarray | None:
        """A solution of ``S' diag(curvature) S x = gradient``, or None where it cannot be computed."""
        ...


def score_weights(system: ScoreSystem, n: int, m: int) -> np.ndarray | None:
    """``lambda_i = sigma(-s_i'b)`` at the maximum of ``l(b)`` (module docstring), or None.

    Newton's decrement below ``1e-20 n`` is the maximum to rounding (under quasi-complete separation the supremum,
    approached with the isolated rows' weights at 0: the caller's positivity test rejects them); each step is halved until ``l`` does not fall
    (the rounding of the sum allowed for).  None when ``b`` itself separates, a step cannot be solved or finds no
    ascent, or the fit diverges (:data:`DIVERGED_OBJECTIVE`, :data:`DIVERGED_COEFFICIENT`).
    """
    coef = np.zeros(m)
    objective = -n * np.log(2.0)
    for _ in range(CERTIFICATE_ITERATIONS):
        eta = system.margins(coef)
        if eta.min() >= 0 and eta.max() > 0:  # b itself separates: no certificate can exist
            return None
        weights = scipy.special.expit(-eta)
        gradient = system.scores(weights)
        step = system.newton_step(weights * (1.0 - weights), gradient)
        if step is None:
            return None
        if gradient @ step < 1e-20 * n:
            return weights
        size = 1.0
        while size > 1e-10:
            trial = coef + size * step
            value = -np.logaddexp(0.0, -system.margins(trial)).sum()
            if value >= objective - 1e-13 * abs(objective):
                break
            size /= 2
        else:
            return None
        coef, objective = trial, value
        if objective > DIVERGED_OBJECTIVE or np.abs(coef).max(initial=0.0) > DIVERGED_COEFFICIENT:
            return None
    return None
