"""Over-relaxed variance draws: a conditional draw that lands on the far side of the conditional from the current value
(Adler 1981; Neal 1998), so that a variance tied to its random effects moves further per iteration than with
independent conditional draws.

**The step.**  ``sigma^2 | u ~ IG(k, B)`` for each random-effect term's variance (Luts & Ormerod 2014, Appendix A,
step 3, and the half-t's given its auxiliary variable), i.e. ``sigma^2 = B / G`` with ``G ~ Gamma(k, 1)``.  With ``z =
Phi^-1(F_k(B / sigma^2))`` (``F_k`` the ``Gamma(k, 1)`` CDF), ``z ~ N(0, 1)`` exactly when ``sigma^2`` follows the
conditional, and Adler's step

    z' = -alpha z + sqrt(1 - alpha^2) e,        e ~ N(0, 1),  0 <= alpha < 1,

keeps ``N(0, 1)``: ``(z, z')`` is jointly normal with correlation ``-alpha``, symmetric in the two, so the step is
reversible with respect to it.  The map from ``sigma^2`` to ``z`` is a bijection, so the step on ``z`` carries its
reversibility to ``sigma^2`` (Neal 1998, section 3: a one-dimensional conditional transformed to a Gaussian), and a
Gibbs sampler that makes it in place of the ordinary draw keeps its target.  ``alpha = 0`` is the ordinary draw.  Both
tails are computed from the side where they are accurate (the regularised gamma function's complement above the
median), so no value of ``sigma^2`` maps to an infinite ``z``.

**Why.**  Given its random effects a term's variance is narrow beside its posterior, and the pair crawls; the
over-relaxed draw moves it across its conditional.  It starts after tuning (the collapsed step's schedule is settled
during tuning from the ordinary draws' lag-1 autocorrelation, which over-relaxing would hide).  Its effect on mixing
is measured by ``python -m benchmarks.gibbs_mixing``.

**Not over-relaxed.**  The learned penalty's variance, over a few slopes, is wide given them: over-relaxed, it would
send the slopes' prior precision from one tail to the other each iteration.  The Gaussian ``theta | w, Sigma`` is not
over-relaxed either: given the augmentation weights the mean of ``theta`` follows ``theta`` itself, and stepping
across it each iteration makes the chain oscillate.  Inverse-Wishart matrices keep their ordinary draws.

Checked: the step keeps its inverse gamma (``tests/engines/test_overrelax.py``); the samplers that make it are checked
against quadrature with it in place (``tests/engines/linear/test_interweave.py``,
``tests/engines/linear/test_collapsed_variance.py``)."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ..linalg import compiled

#: ``alpha`` of the over-relaxed variance draws of the default Gibbs samplers (``0`` gives the ordinary draws).
RELAXATION = 0.95


def _gamma_normal_score(shape: float, value: float) -> float:
    """``Phi^-1(F(value))`` for ``F`` the ``Gamma(shape, 1)`` CDF, from the lower or the upper tail, whichever is
    smaller (accurate in both); a tail probability that underflows to 0 (below about 1e-308, beyond ``|z| = 37.5``)
    gives ``-38`` or ``38``."""
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


def _relaxed_gamma(shape: float, value: float, alpha: float, normal: float) -> float:
    """The over-relaxed step on ``G = value`` of ``Gamma(shape, 1)`` (module docstring) with its standard normal
    given; NaN, 0 or infinity where the new value is not representable."""
    z = _gamma_normal_score(shape, value)
    return _gamma_from_normal_score(shape, -alpha * z + math.sqrt(1.0 - alpha * alpha) * normal)


def _compiled_gamma_normal_score(shape, value):
    """:func:`_gamma_normal_score` compiled, on scipy's own C functions (the same values)."""
    lower = _special_gammainc(shape, value, 0)
    if lower <= 0.5:
        return _special_ndtri(lower, 0) if lower > 0.0 else -38.0
    upper = _special_gammaincc(shape, value, 0)
    return -_special_ndtri(upper, 0) if upper > 0.0 else 38.0


def _compiled_relaxed_gamma(shape, value, alpha, normal):
    """:func:`_relaxed_gamma` compiled."""
    z = -alpha * _compiled_gamma_normal_score(shape, value) + math.sqrt(1.0 - alpha * alpha) * normal
    if z <= 0.0:
        return _special_gammaincinv(shape, _special_ndtr(z, 0), 0)
    return _special_gammainccinv(shape, _special_ndtr(-z, 0), 0)


if compiled.numba is not None:
    _special_gammainc = compiled.scipy_special("gammainc", 2)
    _special_gammaincc = compiled.scipy_special("gammaincc", 2)
    _special_gammaincinv = compiled.scipy_special("gammaincinv", 2)
    _special_gammainccinv = compiled.scipy_special("gammainccinv", 2)
    _special_ndtri = compiled.scipy_special("ndtri")
    _special_ndtr = compiled.scipy_special("ndtr")
    _compiled_gamma_normal_score = compiled.compile_nogil(_compiled_gamma_normal_score, inline=True)
    compiled_relaxed_gamma = compiled.compile_nogil(_compiled_relaxed_gamma)
else:  # never called: relaxed_inverse_gamma checks compiled.available()
    compiled_relaxed_gamma = None


def relaxed_inverse_gamma(shape: float, scale: float, current: float, rng: np.random.Generator, alpha: float) -> float:
    """The over-relaxed step of ``sigma^2 | rest ~ IG(shape, scale)`` from ``current`` (module docstring): one standard
    normal from ``rng``.  Where the new value is not representable (a normal score beyond ``ndtr``'s range, an event
    of probability below 1e-300 from a chain at its target) the ordinary draw ``scale / G`` is taken instead.  Compiled
    where numba is installed (the same scipy functions, one call instead of six ufunc calls)."""
    normal = float(rng.standard_normal())
    step = compiled_relaxed_gamma if compiled.available() else _relaxed_gamma
    gamma = float(step(shape, scale / current, alpha, normal))
    if not gamma > 0.0 or not math.isfinite(gamma):
        gamma = float(rng.gamma(shape))
    return scale / gamma
