"""The prior of one variance ``sigma^2``: a law per prior record, chosen from one table (:data:`LAWS`).

Every engine asks this module, and only this module, about a single-column variance component's prior.  A
component carries its prior as a record of :mod:`bayesvm.priors` (``comp.prior``); :func:`law_of` finds the record's
law in :data:`LAWS`, and the module's functions (:func:`update`, :func:`draw`, :func:`mode`, :func:`log_density`,
...) ask that law.  A new variance prior is a record and a law with the methods of :class:`VarianceLaw`, registered by
one line of the table (``docs/reference/engines.md``, "Adding a variance prior").

Every law here keeps the variance's conditional an inverse gamma, so each engine keeps its conjugate step:

**Inverse gamma** (Luts & Ormerod 2014, section 3.1): ``sigma^2 ~ IG(A, B)``; the paper's ``IG(0.01, 0.01)``
behaves badly when the data barely identify the variance (Gelman 2006): nearly improper, its posterior
can run off to ``10^9`` when each level has one row.

**Half-t** ``sigma ~ t_nu^+(0, s)``, written with an auxiliary variable ``a`` (Huang & Wand 2013, Result 5)::

    sigma^2 | a ~ IG(nu / 2, nu / a),    a ~ IG(1 / 2, 1 / s^2),

so every conditional stays inverse gamma and each engine keeps its conjugate update:

- mean-field VB (:func:`update`, one coordinate step each)::

      q(sigma^2) = IG(nu/2 + J/2,  nu E[1/a] + S/2),      S = sum_j E[u_j^2]
      q(a)       = IG((nu + 1)/2,  nu E[1/sigma^2] + 1/s^2);

- Gibbs (:func:`draw`): the same two conditionals with draws in place of expectations;
- ECME (:func:`mode`): the conditional mode of the marginal ``p(sigma^2 | u)``, the positive root of
  ``(J + nu + 2) v^2 - (S - (J + 1) nu s^2) v - S nu s^2 = 0`` (``S = sum u_j^2``);
- EP's lattice over ``log sigma^2`` (:func:`log_density`): the marginal density
  ``p(sigma^2) = 2 Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) s) (1 + sigma^2/(nu s^2))^(-(nu+1)/2) / (2 sigma)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np
from scipy.special import digamma, gammaln

from ..errors import BayesvmError
from ..priors import HalfT, InverseGamma
from .overrelax import relaxed_inverse_gamma

LOG_PI = float(np.log(np.pi))
TINY = float(np.finfo(float).tiny)


class CompiledPrior(NamedTuple):
    """A law as the compiled Gibbs chain takes it (:mod:`bayesvm.engines.linear.fused_iteration`): the prior's
    conditional ``IG(shape, rate)``, or, with ``half_t``, ``IG(nu / 2, nu / a)`` given an auxiliary
    ``a | sigma^2 ~ IG((nu + 1) / 2, nu / sigma^2 + 1 / t_scale^2)`` (``a = t_scale^2`` before its first draw)."""

    half_t: bool
    shape: float
    rate: float
    nu: float
    t_scale: float


class VarianceLaw(Protocol):
    """What an engine asks of a variance prior (one law per prior record; :data:`LAWS`).  ``n_levels`` is ``J``, the
    number of values sharing the variance; ``posterior_type`` the mean-field VB factor's class
    (:class:`bayesvm.engines.components.ComponentPosterior`: ``shape``, ``scale`` (1 x 1 rate), ``aux_rate``)."""

    def initial(self, posterior_type): ...  # q with E[1/sigma^2] = 1

    def update(self, n_levels: int, second: float, previous, posterior_type): ...  # VB coordinate step

    def bound(self, post) -> float: ...  # E[log p] - E[log q] of the variance (and any auxiliary)

    def conditional_inverse_gamma(self, aux: float | None) -> tuple[float, float]: ...  # the prior's IG given aux

    def draw_auxiliary(self, variance: float, rng: np.random.Generator) -> float | None: ...  # Gibbs

    def mode(self, n_levels: int, sum_squares: float) -> float: ...  # ECME

    def modal_refusal(self) -> str | None: ...  # why a joint posterior mode is degenerate, or None

    def log_density(self, variance): ...  # log p(sigma^2), every constant

    def scalar_log_density(self) -> Callable[[float], float]: ...

    def log_density_of_log_variance(self) -> Callable[[float], float]: ...

    def compiled(self) -> CompiledPrior | None: ...  # None: the compiled chain leaves the variance to Python

    def describe(self) -> str: ...


class InverseGammaLaw:
    """``sigma^2 ~ IG(A, B)`` (Luts & Ormerod 2014, Alg. 2 step 4 for VB)."""

    def __init__(self, prior: InverseGamma):
        self.a, self.b = float(prior.a), float(prior.b)

    def initial(self, posterior_type):
        return posterior_type(shape=self.a, scale=np.eye(1) * self.a)

    def update(self, n_levels, second, previous, posterior_type):
        return posterior_type(shape=self.a + n_levels / 2.0, scale=np.array([[self.b + 0.5 * second]]))

    def bound(self, post) -> float:
        e_log, e_inv, entropy = _inverse_gamma_moments(post)
        a, b = self.a, self.b
        return float(a * np.log(b) - gammaln(a) - (a + 1.0) * e_log - b * e_inv + entropy)

    def conditional_inverse_gamma(self, aux):
        return self.a, self.b

    def draw_auxiliary(self, variance, rng):
        return None

    def mode(self, n_levels, sum_squares):
        return (self.b + 0.5 * sum_squares) / (self.a + 0.5 * n_levels + 1.0)

    def modal_refusal(self):
        return None

    def log_density(self, variance):
        v = np.asarray(variance, dtype=float)
        return self.a * np.log(self.b) - gammaln(self.a) - (self.a + 1.0) * np.log(v) - self.b / v

    def scalar_log_density(self):
        a, b = self.a, self.b
        constant = a * math.log(b) - math.lgamma(a)
        return lambda v: constant - (a + 1.0) * math.log(v) - b / v

    def log_density_of_log_variance(self):
        a, b = self.a, self.b
        return lambda t: -a * t - b * math.exp(-t)

    def compiled(self):
        return CompiledPrior(False, self.a, self.b, 0.0, 1.0)

    def describe(self):
        return f"sigma^2 ~ IG({self.a:g}, {self.b:g})"


class HalfTLaw:
    """``sigma ~ t_nu^+(0, s)`` through its auxiliary form (module docstring; Huang & Wand 2013, Result 5)."""

    def __init__(self, prior: HalfT):
        self.nu, self.s = float(prior.nu), float(prior.scale)

    def initial(self, posterior_type):
        half = self.nu / 2.0
        return posterior_type(shape=half, scale=np.eye(1) * half, aux_rate=self.nu + self.s**-2)

    def update(self, n_levels, second, previous, posterior_type):
        nu, s = self.nu, self.s
        aux_rate = previous.aux_rate if previous is not None and previous.aux_rate is not None else nu + s**-2
        e_inv_a = 0.5 * (nu + 1.0) / max(aux_rate, TINY)  # (an extrapolated state may underflow)
        shape, rate = 0.5 * (nu + n_levels), max(nu * e_inv_a + 0.5 * second, TINY)
        return posterior_type(shape=shape, scale=np.array([[rate]]), aux_rate=nu * shape / rate + s**-2)

    def bound(self, post) -> float:
        """``E[log p(sigma^2 | a)] + E[log p(a)]`` minus both factors' ``E[log q]``, all constants included."""
        e_log, e_inv, entropy = _inverse_gamma_moments(post)
        nu, s = self.nu, self.s
        a_shape, a_rate = 0.5 * (nu + 1.0), post.aux_rate
        e_log_a, e_inv_a = np.log(a_rate) - digamma(a_shape), a_shape / a_rate
        # E[log IG(sigma^2; nu/2, nu/a)]
        given_a = (
            0.5 * nu * (np.log(nu) - e_log_a) - gammaln(0.5 * nu) - (0.5 * nu + 1.0) * e_log - nu * e_inv_a * e_inv
        )
        # E[log IG(a; 1/2, 1/s^2)]
        prior_a = -np.log(s) - gammaln(0.5) - 1.5 * e_log_a - e_inv_a / s**2
        entropy_a = -(a_shape * np.log(a_rate) - gammaln(a_shape) - (a_shape + 1.0) * e_log_a - a_rate * e_inv_a)
        return float(given_a + prior_a + entropy + entropy_a)

    def conditional_inverse_gamma(self, aux):
        a = self.s**2 if aux is None else aux
        return 0.5 * self.nu, self.nu / a

    def draw_auxiliary(self, variance, rng):
        """``a | sigma^2 ~ IG((nu + 1) / 2, nu / sigma^2 + 1 / s^2)``."""
        return (self.nu / variance + self.s**-2) / rng.gamma(0.5 * (self.nu + 1.0))

    def mode(self, n_levels, sum_squares):
        nu, s2, S = self.nu, self.s**2, sum_squares
        lead, mid = n_levels + nu + 2.0, S - (n_levels + 1.0) * nu * s2
        return (mid + np.sqrt(mid**2 + 4.0 * lead * S * nu * s2)) / (2.0 * lead)

    def modal_refusal(self):
        return "a half-t prior has positive density at sigma = 0"

    def log_density(self, variance):
        """The half-t's marginal, ``a`` integrated out."""
        v = np.asarray(variance, dtype=float)
        nu, s = self.nu, self.s
        log_sd_density = (
            np.log(2.0) + gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * (np.log(nu) + LOG_PI) - np.log(s)
            - 0.5 * (nu + 1.0) * np.log1p(v / (nu * s**2))
        )  # fmt: skip
        return log_sd_density - np.log(2.0) - 0.5 * np.log(v)

    def scalar_log_density(self):
        nu, s = self.nu, self.s
        constant = (
            math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * (math.log(nu) + LOG_PI) - math.log(s)
        )  # (the log 2 of the half-t's density cancels the log 2 of the change to the variance)
        scale = nu * s * s
        return lambda v: constant - 0.5 * (nu + 1.0) * math.log1p(v / scale) - 0.5 * math.log(v)

    def log_density_of_log_variance(self):
        nu, scale2 = self.nu, self.s**2
        return lambda t: 0.5 * t - 0.5 * (nu + 1.0) * math.log1p(math.exp(t) / (nu * scale2))

    def compiled(self):
        return CompiledPrior(True, 0.0, 0.0, self.nu, self.s)

    def describe(self):
        return f"sigma ~ half-t({self.nu:g}, {self.s:.3g})"


#: The law of each variance prior record: ``LAWS[type(record)](record)`` answers every engine's question.
LAWS: dict[type, Callable[[object], VarianceLaw]] = {InverseGamma: InverseGammaLaw, HalfT: HalfTLaw}


def law_of(comp) -> VarianceLaw:
    """The law of ``comp.prior`` (a record of :mod:`bayesvm.priors`) from :data:`LAWS`; a record without one is
    refused, naming the component."""
    maker = LAWS.get(type(comp.prior))
    if maker is None:
        raise BayesvmError(
            f"the variance prior {comp.prior!r} of {comp.name!r} has no law in bayesvm.engines.variance_prior.LAWS "
            f"(known: {', '.join(t.__name__ for t in LAWS)})"
        )
    return maker(comp.prior)


def _inverse_gamma_moments(post) -> tuple[float, float, float]:
    """``E[log sigma^2]``, ``E[1/sigma^2]`` and the entropy of ``q(sigma^2) = IG(shape, rate)``."""
    shape, rate = post.shape, float(post.scale[0, 0])
    e_log, e_inv = np.log(rate) - digamma(shape), shape / rate
    entropy = -(shape * np.log(rate) - gammaln(shape) - (shape + 1.0) * e_log - rate * e_inv)
    return e_log, e_inv, entropy


def initial(comp, posterior_type):
    """``q`` with ``E[1/sigma^2] = 1`` (and, for an auxiliary, ``q(a)`` given it)."""
    return law_of(comp).initial(posterior_type)


def update(comp, second: float, previous, posterior_type):
    """Mean-field VB: ``q(sigma^2)`` (and any auxiliary's ``q``) given ``second = sum_j E[u_j^2]`` and ``previous``."""
    return law_of(comp).update(comp.n_levels, second, previous, posterior_type)


def bound(comp, post) -> float:
    """``E[log p(sigma^2)] - E[log q(sigma^2)]`` (with an auxiliary: its terms too), all constants included."""
    return law_of(comp).bound(post)


def conditional_inverse_gamma(comp, aux: float | None) -> tuple[float, float]:
    """``(shape, rate)`` of the prior of ``sigma^2`` as an inverse gamma, given its auxiliary variable ``aux`` (None
    before the first draw, or for a law without one)."""
    return law_of(comp).conditional_inverse_gamma(aux)


def draw_auxiliary(comp, variance: float, rng: np.random.Generator) -> float | None:
    """Gibbs: the auxiliary given ``sigma^2`` (None for a law without one)."""
    return law_of(comp).draw_auxiliary(variance, rng)


def draw(
    comp,
    sum_squares: float,
    rng: np.random.Generator,
    aux: float | None,
    current: float | None = None,
    relaxation: float = 0.0,
) -> tuple[float, float | None]:
    """Gibbs: ``sigma^2 | u (, a) ~ IG(shape + J / 2, rate + S / 2)`` from the law's conditional inverse gamma, then
    the auxiliary given ``sigma^2``; returns ``(sigma^2, a)``.  With ``relaxation > 0`` and the ``current`` variance,
    the over-relaxed step of the same inverse gamma (:func:`bayesvm.engines.overrelax.relaxed_inverse_gamma`)."""
    law = law_of(comp)
    shape, rate = law.conditional_inverse_gamma(aux)
    shape, scale = shape + 0.5 * comp.n_levels, rate + 0.5 * sum_squares
    if relaxation > 0.0 and current is not None:
        variance = relaxed_inverse_gamma(shape, scale, current, rng, relaxation)
    else:
        variance = scale / rng.gamma(shape)
    return variance, law.draw_auxiliary(variance, rng)


def mode(comp, sum_squares: float) -> float:
    """ECME: the conditional mode of ``sigma^2`` given the coefficients (``sum_squares = sum_j u_j^2``)."""
    return law_of(comp).mode(comp.n_levels, sum_squares)


def modal_refusal(comp) -> str | None:
    """Why the joint posterior mode of a component's values and variance is degenerate under its prior, or None."""
    return law_of(comp).modal_refusal()


def log_density(comp, variance: float | np.ndarray) -> float | np.ndarray:
    """``log p(sigma^2)`` with every constant (an auxiliary integrated out)."""
    return law_of(comp).log_density(variance)


def scalar_log_density(comp) -> Callable[[float], float]:
    """:func:`log_density` at one variance as a scalar function with its constants computed once (every constant
    kept), for the samplers' log posterior of each kept draw."""
    return law_of(comp).scalar_log_density()


def log_density_of_log_variance(comp) -> Callable[[float], float]:
    """``t -> log p(t)`` for ``t = log sigma^2`` (:func:`log_density` with its Jacobian ``+ t``), up to a constant, as
    a scalar function for samplers that call it many times."""
    return law_of(comp).log_density_of_log_variance()


def compiled(comp) -> CompiledPrior | None:
    """The component's prior as the compiled Gibbs chain takes it, or None where it has no compiled form."""
    return law_of(comp).compiled()


def describe(comp) -> str:
    """The prior in words, for ``summary()``."""
    return law_of(comp).describe()
