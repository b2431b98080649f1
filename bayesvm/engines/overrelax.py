"""Over-relaxed variance draws: a conditional draw that lands on the far side of the conditional from the current
value (Adler 1981; Neal 1998), so that a variance tied to its random effects moves further per iteration than with
independent conditional draws.

**The step.**  ``sigma^2 | u ~ IG(k, B)`` (Luts & Ormerod 2014, Appendix A, step 3, and the half-t's given its auxiliary
variable), i.e. ``sigma^2 = B / G`` with ``G ~ Gamma(k, 1)``.  With ``z = Phi^-1(F_k(B / sigma^2))`` (``F_k`` the
``Gamma(k, 1)`` CDF), ``z ~ N(0, 1)`` exactly when ``sigma^2`` follows the conditional, and Adler's step

    z' = -alpha z + sqrt(1 - alpha^2) e,        e ~ N(0, 1),  0 <= alpha < 1,

keeps ``N(0, 1)``: ``(z, z')`` is jointly normal with correlation ``-alpha``, symmetric in the two, so the step is
reversible with respect to it.  The map from ``sigma^2`` to ``z`` is a bijection, so the step on ``z`` carries its
reversibility to ``sigma^2`` (Neal 1998, section 3: a one-dimensional conditional transformed to a Gaussian), and a
Gibbs sampler that makes it in place of the ordinary draw keeps its target.  ``alpha = 0`` is the ordinary draw.  Both
tails are computed from the side where they are accurate (the regularised gamma function's complement above the
median), so no value of ``sigma^2`` maps to an infinite ``z``.

**Why.**  Given its random effects a variance with many levels is narrow (``k`` about half the levels) beside its
posterior, and the pair crawls.  Over-relaxing the draw, after tuning (the collapsed step's schedule is settled during
tuning from the ordinary draws' lag-1 autocorrelation, which over-relaxing would hide), measured with 4 chains in one
process, seeds 1 and 2 (``python -m benchmarks.gibbs_mixing``): Fair's affairs (two random intercepts of 6 and 4
levels) smallest bulk ESS 1,139 and 1,242 -> 1,993 and 2,404 of 8,000 draws; lme4's cbpp without the collapsed step's
switch 26 and 48 -> 122 and 65; toenail's patient SD about 3,300 -> 4,700 of 10,000; cbpp with the switch, the nested
sites and the one-row groups about as before (within the seeds' spread).

**Not over-relaxed: ``theta | w``.**  The same step on the Gaussian ``theta | w, Sigma`` (``theta' = mu - alpha (theta -
mu) + sqrt(1 - alpha^2) d``, exact as well) raised toenail's smallest ESS by a third, but on cbpp without the switch it
cut the fixed effects' from 26 and 48 to 8 and 8 (R-hat 1.4-1.5; 21 and 92 with ``alpha = 0.5``): given the
augmentation weights the mean of ``theta`` follows ``theta`` itself, and stepping across it each iteration made the
chain oscillate.  Inverse-Wishart matrices keep their ordinary draws.

Checked: the step keeps its inverse gamma (``tests/engines/test_overrelax.py``); the samplers that make it are checked
against quadrature with it in place (``tests/engines/linear/test_interweave.py``,
``tests/engines/linear/test_collapsed_variance.py``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

#: ``alpha`` of the over-relaxed variance draws of the default Gibbs samplers (``0`` gives the ordinary draws).
RELAXATION = 0.95


def _gamma_normal_score(shape: float, value: float) -> float:
    """``Phi^-1(F(value))`` for ``F`` the ``Gamma(shape, 1)`` CDF, from the lower or the upper tail, whichever is
    smaller (accurate in both)."""
    lower = float(special.gammainc(shape, value))
    if lower <= 0.5:
        return float(special.ndtri(lower)) if lower > 0.0 else -38.0
    upper = float(special.gammaincc(shape, value))
    return -float(special.ndtri(upper)) if upper > 0.0 else 38.0


def _gamma_from_normal_score(shape: float, z: float) -> float:
    """The inverse of :func:`_gamma_normal_score`."""
    if z <= 0.0:
        return float(special.gammaincinv(shape, special.ndtr(z)))
    return float(special.gammainccinv(shape, special.ndtr(-z)))


def relaxed_inverse_gamma(shape: float, scale: float, current: float, rng: np.random.Generator, alpha: float) -> float:
    """The over-relaxed step of ``sigma^2 | rest ~ IG(shape, scale)`` from ``current`` (module docstring): one standard
    normal from ``rng``.  Where the new value is not representable (a normal score beyond ``ndtr``'s range, an event
    of probability below 1e-300 from a chain at its target) the ordinary draw ``scale / G`` is taken instead."""
    z = _gamma_normal_score(shape, scale / current)
    z_new = -alpha * z + math.sqrt(1.0 - alpha * alpha) * float(rng.standard_normal())
    gamma = _gamma_from_normal_score(shape, z_new)
    if not gamma > 0.0 or not math.isfinite(gamma):
        gamma = float(rng.gamma(shape))
    return scale / gamma
