"""The block of the penalised slopes: one law per selection prior, chosen from one table (:data:`LAWS`).

Every selection engine asks this module, and only this module, about the prior on the slopes.  A model carries the
prior as a record of :mod:`bayesvm.priors` (``problem.prior``); :func:`law_of` finds the record's law in :data:`LAWS`,
and the engines ask that law (:class:`SlopeLaw`): mean-field VB its coordinate-ascent map (which SVI and the
out-of-core VB run too), Gibbs its conditional step, the accurate fit (EP with a site per slope) its tilted moments,
the slopes' widths and the prior of its learned scale, the imputation engines its log density.  A new slope prior
is a record and a law with these methods, registered by one line of the table (``docs/reference/engines.md``,
"Adding a slope prior").

The three laws:

* **Laplace-zero** (Luts & Ormerod 2014, section 3.2): ``gamma_k v_k``, ``gamma_k ~ Bernoulli(rho)``,
  ``v_k ~ Laplace(0, sigma_u)``, ``sigma_u^2 ~ IG(A_u, B_u)`` learned; Alg. 3 (VB), Appendix B (Gibbs);
* **spike-and-slab** (Polson & Scott 2011, eq. 16): ``(1 - pi) delta_0 + pi N(0, nu^2 s_k^2)``; Carbonetto &
  Stephens' (2012) factors (VB), the collapsed model moves of eq. 17 (Gibbs);
* **lasso** (Polson & Scott's ``alpha = 1``): ``Laplace(0, nu s_k)``, ``1/nu ~ Gamma(a, b)`` when learned; Park &
  Casella's normal scale mixture (VB), section 4.1 (Gibbs), EM / ECME (its mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
from scipy.special import gammaln

from ...errors import BayesvmError
from ...priors import LaplaceZero, Lasso, SpikeSlab
from .gibbs_steps import LaplaceZeroStep, LassoStep, SpikeSlabStep
from .tilted import (
    SlopeTilted,
    laplace_quantile,
    laplace_zero_quantile,
    laplace_zero_tilted,
    lasso_tilted,
    spike_slab_quantile,
    spike_slab_tilted,
)


class SlopeLaw(Protocol):
    """What the selection engines ask of a slope prior."""

    #: the engines carry inclusion indicators ``gamma_k`` (a point mass a slope can reach)
    indicators: bool
    #: Gibbs makes line moves along each slope by default
    lines_by_default: bool
    #: mean-field VB has local optima in model space and searches it (two starts and model moves), so SVI holds
    #: every slope in its slab until its first stop
    model_search: bool
    #: how many hyperparameters the prior's learned scale adds to the accurate fit's lattice (0 or 1)
    scale_size: int
    #: ``vb=None`` chooses the accurate fit where the rows and slopes allow (else its mean-field VB)
    accurate_by_default: bool
    #: mean-field VB's default sweeps (``bsvm(max_iter=None)``)
    vb_sweeps: int
    #: the name of the learned scale's draws in an ArviZ trace (None when the scale is fixed)
    scale_name: str | None
    #: ``summary()``'s words: the Gibbs sampler's title, the mean-field factors, whether the VB title names them
    #: (else Luts & Ormerod's algorithm), the factors as the pooled fits name them, and the approximation's caveat
    gibbs_title: str
    vb_family: str
    vb_named_by_family: bool
    vb_reference: str
    vb_caveat: str

    def describe(self, estimate: tuple[str, float] | None) -> str: ...  # the prior in words, with its learned scale

    def ascent(self, problem): ...  # mean-field VB's coordinate-ascent map (initial_state, update, row_moments, ...)

    def mean_field(self, problem, **options): ...  # the prior's mean-field VB fit (options: tol, max_iter, accelerate)

    def gibbs_step(self, problem, rng: np.random.Generator): ...  # the sampler's conditional step object

    def mode(self, problem, **options): ...  # the posterior mode by EM / ECME (options: tol, max_iter)

    def widths(self, prior_scale: np.ndarray, phi_scale: np.ndarray) -> np.ndarray: ...  # EP: S_k or b_k

    def prior_variance(self, widths: np.ndarray) -> np.ndarray: ...  # each slope's prior variance (EP's start)

    def start(self, problem) -> tuple[list, np.ndarray]: ...  # EP's start: q of each component, phi_scale

    def scale_log_prior(self, phi_scale: np.ndarray) -> float: ...  # log p(phi_scale) with its Jacobian

    def scale_value(self, phi_scale: np.ndarray) -> float: ...  # the scale summary() reports

    def tilted(self, m: np.ndarray, v: np.ndarray, width: np.ndarray) -> SlopeTilted: ...

    def quantile(self, tilted: SlopeTilted, u: np.ndarray) -> np.ndarray: ...

    def log_prior(self, prior_scale, fit, slopes, on, rng, scale_draws=None): ...  # log p(slopes) per draw, scale draws


def mean_field_start(law, problem) -> tuple[list, np.ndarray]:
    """The accurate fit's start: the prior's mean-field VB fit of the same model (its components' ``q`` and the
    scale's ``phi`` at its mean)."""
    warm = law.mean_field(problem, tol=1e-6, max_iter=300)
    return warm.components, law.start_scale(warm)


def no_mode(prior) -> BayesvmError:
    """The refusal of a posterior mode under a point mass at zero."""
    return BayesvmError(
        f"{type(prior).__name__} has no posterior mode: under a point mass at zero the density is infinite there, so "
        "every slope's mode is 0"
    )


class LaplaceZeroLaw:
    """``gamma v``, ``v ~ Laplace(0, sigma_u)`` written as ``N(0, sigma_u^2 / b)``, ``b ~ IG(1, 1/2)``."""

    lines_by_default = True
    model_search = False
    scale_size = 1
    accurate_by_default = True  # EP's inclusion probabilities are far closer to Gibbs's than Alg. 3's
    vb_sweeps = 2000  # Alg. 3's indicators can creep for a while
    scale_name = "sigma_u"
    gibbs_title = "Gibbs sampling (Luts & Ormerod 2014, Appendix B)"
    vb_family = "the factors of Luts & Ormerod 2014, Alg. 3"
    vb_named_by_family = False
    vb_reference = "Alg. 3"
    vb_caveat = (
        "mean-field VB with q(beta, v){per_data_set} q(sigma_u^2) q(a) q(b) q(gamma); it understates posterior\n"
        "SDs, and its inclusion probabilities are nearer 0 or 1 than Gibbs's and can disagree on which slopes are in\n"
        "(AER's CreditCard, Laplace-zero: 'income' 1.00 against Gibbs's 0.05): compare with {remedy}."
    )

    def __init__(self, prior: LaplaceZero):
        self.prior = prior

    @property
    def indicators(self) -> bool:
        return self.prior.rho < 1

    def ascent(self, problem):
        from .vb import LaplaceZeroAscent

        return LaplaceZeroAscent(problem)

    def mean_field(self, problem, **options):
        from .vb import fit_laplace_zero_vb

        return fit_laplace_zero_vb(problem, **options)

    def gibbs_step(self, problem, rng):
        return LaplaceZeroStep(problem, rng)

    def mode(self, problem, **options):
        raise no_mode(self.prior)

    def widths(self, prior_scale, phi_scale):
        """The Laplace scale ``sigma_u s_k`` (``s_k = 1``), ``phi_scale = log sigma_u^2``."""
        return np.exp(0.5 * phi_scale[0]) * prior_scale

    def prior_variance(self, widths):
        return 2.0 * widths**2

    def start(self, problem):
        return mean_field_start(self, problem)

    def start_scale(self, warm):
        return np.array([np.log(warm.sigma2_scale / warm.sigma2_shape)], dtype=float)

    def scale_log_prior(self, phi_scale):
        """``IG(A_u, B_u)`` of ``sigma_u^2 = e^phi``, with the Jacobian ``+ phi``."""
        t = float(phi_scale[0])
        a, b = self.prior.variance.a, self.prior.variance.b
        return a * np.log(b) - gammaln(a) - a * t - b * np.exp(-t)  # (-a - 1) t - b e^-t, plus t from d sigma^2

    def scale_value(self, phi_scale):
        return float(np.exp(0.5 * phi_scale[0]))

    def tilted(self, m, v, width):
        return laplace_zero_tilted(self.prior.rho, m, v, width)

    def describe(self, estimate):
        text = (
            f"Laplace-zero, rho = {self.prior.rho:g}: slope = gamma v, gamma ~ Bernoulli(rho), v ~ Laplace(0, sigma_u)"
        )
        return text if estimate is None else f"{text}; {estimate[0].format(s='sigma_u')} = {estimate[1]:.4g}"

    def quantile(self, tilted, u):
        return laplace_zero_quantile(tilted, u)

    def log_prior(self, prior_scale, fit, slopes, on, rng, scale_draws=None):
        """``log rho - log(2 sigma_u s_k) - |v_k| / (sigma_u s_k)`` per included slope, ``log(1 - rho)`` per excluded
        one, and ``IG(A_u, B_u)`` of ``sigma_u^2`` drawn from ``q(sigma_u^2)`` (or given at the nodes)."""
        prior, size = self.prior, slopes.shape[0]
        sigma2 = (
            scale_draws**2 if scale_draws is not None else fit.sigma2_scale / rng.gamma(fit.sigma2_shape, size=size)
        )
        scale = np.sqrt(sigma2)[:, None] * prior_scale[None, :]
        total = np.where(on, np.log(prior.rho) - np.log(2.0 * scale) - np.abs(slopes) / scale, 0.0).sum(axis=1)
        total += (~on).sum(axis=1) * (np.log1p(-prior.rho) if prior.rho < 1 else 0.0)
        a, b = prior.variance.a, prior.variance.b
        total += a * np.log(b) - gammaln(a) - (a + 1.0) * np.log(sigma2) - b / sigma2
        return total, np.sqrt(sigma2)


class SpikeSlabLaw:
    """``(1 - pi) delta_0 + pi N(0, nu^2 s_k^2)``, the slab's scale fixed."""

    indicators = True
    lines_by_default = False
    model_search = True
    scale_size = 0
    accurate_by_default = False  # Carbonetto & Stephens' factors are the closer approximation here
    vb_sweeps = 500
    scale_name = None
    gibbs_title = "Gibbs sampling (Polson & Scott 2011, section 4.2)"
    vb_family = "a spike-and-Gaussian factor per slope (Carbonetto & Stephens 2012)"
    vb_named_by_family = True
    vb_reference = "the factors of Carbonetto & Stephens 2012"
    vb_caveat = (
        "mean-field VB with q(beta_free, u){per_data_set} prod_k q(beta_k, gamma_k) q(a) q(variance components); it\n"
        "understates posterior SDs, ignores correlations between slopes (with correlated predictors it tends to keep\n"
        "one of a group) and its inclusion probabilities are more extreme than Gibbs's: compare with {remedy}."
    )

    def __init__(self, prior: SpikeSlab):
        self.prior = prior

    def ascent(self, problem):
        from .spike_slab_vb import SpikeSlabAscent

        return SpikeSlabAscent(problem)

    def mean_field(self, problem, **options):
        from .spike_slab_vb import fit_spike_slab_vb

        return fit_spike_slab_vb(problem, **options)

    def gibbs_step(self, problem, rng):
        return SpikeSlabStep(problem, rng)

    def mode(self, problem, **options):
        raise no_mode(self.prior)

    def widths(self, prior_scale, phi_scale):
        """The slab variance ``S_k = nu^2 s_k^2``."""
        return (self.prior.nu * prior_scale) ** 2

    def prior_variance(self, widths):
        return widths

    def start(self, problem):
        return mean_field_start(self, problem)

    def start_scale(self, warm):
        return np.zeros(0)

    def scale_log_prior(self, phi_scale):
        return 0.0

    def scale_value(self, phi_scale):
        raise BayesvmError("the spike-and-slab prior's scale is fixed: it has no value to report")

    def tilted(self, m, v, width):
        return spike_slab_tilted(self.prior.pi, m, v, width)

    def describe(self, estimate):
        return f"spike-and-slab, pi = {self.prior.pi:g}: included slopes ~ N(0, nu^2 s_j^2), nu = {self.prior.nu:g}"

    def quantile(self, tilted, u):
        return spike_slab_quantile(tilted, u)

    def log_prior(self, prior_scale, fit, slopes, on, rng, scale_draws=None):
        """``log pi + log N(beta_k; 0, nu^2 s_k^2)`` per included slope, ``log(1 - pi)`` per excluded one."""
        prior = self.prior
        sd = prior.nu * prior_scale[None, :]
        dens = np.log(prior.pi) - 0.5 * np.log(2.0 * np.pi) - np.log(sd) - 0.5 * (slopes / sd) ** 2
        return np.where(on, dens, np.log1p(-prior.pi)).sum(axis=1), None


class LassoLaw:
    """``Laplace(0, nu s_k)``, ``1/nu ~ Gamma(a, b)`` when ``nu`` is learned; no point mass."""

    indicators = False
    lines_by_default = False
    model_search = False
    accurate_by_default = False
    vb_sweeps = 500
    gibbs_title = "Gibbs sampling (Polson & Scott 2011, section 4.1)"
    vb_family = "Park & Casella's (2008) normal scale mixture for the Laplace slopes"
    vb_named_by_family = True
    vb_reference = "Park & Casella's normal scale mixture"
    vb_caveat = (
        "mean-field VB with q(beta, u){per_data_set} q(tau) q(1/nu) q(a) q(variance components); it understates\n"
        "posterior SDs and shrinks the variance components: compare with {remedy} before relying on the intervals."
    )

    def __init__(self, prior: Lasso):
        self.prior = prior

    @property
    def scale_size(self) -> int:
        return int(self.prior.nu is None)

    @property
    def scale_name(self) -> str | None:
        return "nu" if self.prior.nu is None else None

    def ascent(self, problem):
        from .lasso_vb import LassoAscent

        return LassoAscent(problem)

    def mean_field(self, problem, **options):
        from .lasso_vb import fit_lasso_vb

        return fit_lasso_vb(problem, **options)

    def gibbs_step(self, problem, rng):
        return LassoStep(problem, rng)

    def mode(self, problem, **options):
        """EM, or ECME with a learned ``nu`` (Polson & Scott 2011, sections 3.1 and 3.3)."""
        from .lasso_em import fit_lasso_em

        return fit_lasso_em(problem, **options)

    def widths(self, prior_scale, phi_scale):
        """The Laplace scale ``b_k = nu s_k``, ``phi_scale = log nu`` when learned."""
        nu = self.prior.nu if self.prior.nu is not None else float(np.exp(phi_scale[0]))
        return nu * prior_scale

    def prior_variance(self, widths):
        return 2.0 * widths**2

    def start(self, problem):
        return mean_field_start(self, problem)

    def start_scale(self, warm):
        if self.prior.nu is not None:
            return np.zeros(0)
        return np.array([np.log(warm.scale_law.mean_inverse)], dtype=float)

    def scale_log_prior(self, phi_scale):
        """``Gamma(a, b)`` of ``kappa = 1/nu = e^-phi`` with its Jacobian (0 for a fixed scale)."""
        if not phi_scale.size:
            return 0.0
        kappa = np.exp(-float(phi_scale[0]))
        prior = self.prior
        return prior.a * np.log(prior.b) - gammaln(prior.a) + prior.a * np.log(kappa) - prior.b * kappa

    def scale_value(self, phi_scale):
        return float(np.exp(phi_scale[0]))

    def tilted(self, m, v, width):
        return lasso_tilted(m, v, width)

    def describe(self, estimate):
        prior = self.prior
        if prior.nu is not None:
            return f"lasso: slopes ~ Laplace(0, nu s_j), nu = {prior.nu:g}"
        text = f"lasso: slopes ~ Laplace(0, nu s_j); nu learned (1/nu ~ Gamma({prior.a:g}, {prior.b:g}))"
        return text if estimate is None else f"{text}, {estimate[0].format(s='nu')} = {estimate[1]:.4g}"

    def quantile(self, tilted, u):
        return laplace_quantile(u, tilted.cavity_mean, tilted.cavity_var, tilted.width)

    def log_prior(self, prior_scale, fit, slopes, on, rng, scale_draws=None):
        """``log(kappa / (2 s_k)) - kappa |beta_k| / s_k`` per slope, ``kappa = 1/nu`` fixed, given at the nodes or
        drawn from ``q(kappa)``, and then its ``Gamma(a, b)`` prior."""
        prior, size = self.prior, slopes.shape[0]
        if prior.nu is not None:
            kappa = np.full(size, 1.0 / prior.nu)[:, None]
        elif scale_draws is not None:
            kappa = 1.0 / scale_draws[:, None]
        else:
            kappa = fit.scale_law.sample(rng, size)[:, None]
        s = prior_scale[None, :]
        total = np.sum(np.log(kappa / (2.0 * s)) - kappa * np.abs(slopes) / s, axis=1)
        if prior.nu is not None:
            return total, None
        k = kappa[:, 0]  # the Gamma(a, b) prior of kappa = 1 / nu
        total += prior.a * np.log(prior.b) - gammaln(prior.a) + (prior.a - 1.0) * np.log(k) - prior.b * k
        return total, 1.0 / k


#: The law of each slope prior record: ``LAWS[type(record)](record)`` answers every selection engine's question.
LAWS: dict[type, Callable[[object], SlopeLaw]] = {LaplaceZero: LaplaceZeroLaw, SpikeSlab: SpikeSlabLaw, Lasso: LassoLaw}


def law_of(prior) -> SlopeLaw:
    """The law of the slope prior record ``prior`` from :data:`LAWS`; a record without one is refused, naming it."""
    maker = LAWS.get(type(prior))
    if maker is None:
        raise BayesvmError(
            f"the slope prior {prior!r} has no law in bayesvm.engines.selection.laws.LAWS "
            f"(known: {', '.join(t.__name__ for t in LAWS)})"
        )
    return maker(prior)
