"""The linear and mixed-model view of a fit: :class:`BSVMFit` (coefficients, random effects, variance components,
selection and imputation), on the shared :class:`~bayesvm.results.base.Fit`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..arguments import as_flag, as_level
from ..checks.findings import Diagnostics
from ..engines.gibbs_driver import GibbsResult
from ..engines.linear.em import EMResult
from ..engines.linear.vb import VBResult
from ..errors import ApproximationWarning, BayesvmError
from ..model import LinearModel, gp_index
from ..model.problems import PENALTY_SOURCE, VBProblem
from .base import Fit
from .posterior import posterior_view


@dataclass(frozen=True)
class VarianceEstimate:
    """Posterior summary of one variance component."""

    group: str
    terms: tuple[str, ...]
    mean: np.ndarray  # E[sigma^2] (1x1) or E[Sigma]; NaN where q's mean does not exist (below)
    label: str


@dataclass(eq=False)
class BSVMFit(Fit):
    """A fitted linear or mixed Bayesian SVM (``bsvm()`` without ``kernel=``).

    A fit is built once with everything below; nothing changes it afterwards (the probability map and the last
    :meth:`check_vb` are kept as they are computed on request).

    Attributes
    ----------
    model
        The model (design, penalty, priors, standardisation).
    problem
        The engine's inputs (training rows).
    method
        Engine name, e.g. ``"vb"``.
    result
        The engine's raw output.
    data_name
        How the data were referred to (for ``summary()``).
    vb_note
        Why the default ``vb=None`` chose another engine than the accurate fit (None otherwise).
    diagnostics
        Every finding of the checks run before and after the engine (:class:`bayesvm.checks.findings.Diagnostics`).
    end_of_fit_check
        The PSIS check run at the fit's end, why it could not run, or None (:meth:`check_vb` runs one on request;
        :attr:`last_vb_check` is the latest).
    """

    model: LinearModel
    problem: VBProblem
    method: str
    result: VBResult | GibbsResult | EMResult
    data_name: str = "data"
    tol: float = 1e-8
    #: why the default ``vb=None`` chose another engine than the accurate fit for this fit (``None`` otherwise)
    vb_note: str | None = None
    #: findings of the checks run before and after the engine (:mod:`bayesvm.checks`), given when the fit is built
    diagnostics: Diagnostics = field(default=Diagnostics(), kw_only=True, repr=False, compare=False)
    #: the PSIS check run at the fit's end (a ``VBCheck``), why it could not run (a string), or None where it was not
    #: run (:func:`bayesvm.results.vb_check.check_at_fit_end`)
    end_of_fit_check: object = field(default=None, kw_only=True, repr=False, compare=False)

    # defaults for fits restored from files written before these attributes existed
    _vb_check = None

    def __post_init__(self) -> None:
        super().__post_init__()
        #: the last check the user ran (:meth:`check_vb`), kept for ``summary()``
        self._vb_check = None

    def check_vb(self, draws: int | None = None, seed: int | None = 0, warn: bool = True):
        """PSIS check of a VB fit against the exact pseudo-posterior (see :mod:`bayesvm.results.vb_check`).

        Returns a ``VBCheck`` with ``khat``, a ``verdict`` and, when ``khat <= 0.7``, importance-weighted
        fixed effects; warns (``warn``) when the approximation is unreliable or the weights move a reported mean by
        half of q's SD or more (:class:`bayesvm.errors.ApproximationWarning`).  The result is kept and shown by
        ``summary()``.  ``bsvm()`` runs it at the end of the fits it covers (``Checks(vb_check=...)``).
        """
        if self.model.design.X.shape[0] != self.model.design.n:
            raise BayesvmError("check_vb() needs the training rows in memory; this fit streamed out-of-core data")
        if self.result.z_cov is not None or self.result.imputation is not None:
            from .imputation_check import covers

            reason = covers(self)
            if reason is not None:
                raise BayesvmError(f"check_vb(): {reason}")
        if self.model.prior is not None:
            raise BayesvmError(
                "check_vb() checks q against the pseudo-posterior of the normal-prior models; compare a selection "
                "prior's VB fit with method='gibbs'"
            )
        if not self.posterior.approximate:
            raise BayesvmError(f"check_vb() checks variational fits; this fit used method={self.method!r}")
        from .vb_check import check_vb, check_warning

        try:
            check = check_vb(self, draws=draws, seed=seed)
        except np.linalg.LinAlgError as exc:  # a covariance of q that no Cholesky factor takes
            raise BayesvmError(
                f"the PSIS check could not factorise a covariance of q ({exc}); columns on very different scales "
                "(standardize=False) are the usual cause: refit with standardize=True"
            ) from None
        self._vb_check = check
        message = check_warning(check)
        if warn and message is not None:
            warnings.warn(message, ApproximationWarning, stacklevel=2)
        return self._vb_check

    @property
    def last_vb_check(self):
        """The last PSIS check :meth:`check_vb` kept (a ``VBCheck``), else the end-of-fit check
        (:attr:`end_of_fit_check`: a ``VBCheck``, or why it could not run), or ``None`` where neither ran."""
        return self.end_of_fit_check if self._vb_check is None else self._vb_check

    def _make_posterior(self):
        return posterior_view(self.result)

    # ----- convergence ---------------------------------------------------------------
    @property
    def converged(self) -> bool:
        """VB and EM: the stopping rule was met (multiple imputation: on every completed data set, whose
        posteriors differ by design, so no R-hat across them); Gibbs: every R-hat <= 1.01."""
        if self.posterior.holds_draws and self.result.fits is None:
            from .diagnostics import mcmc_diagnostics

            return bool(mcmc_diagnostics(self)["r_hat"].max() <= 1.01)
        return self.result.converged

    @property
    def n_iter(self) -> int:
        """VB sweeps; Gibbs iterations per chain (tuning included)."""
        if self.posterior.holds_draws:
            return self.result.tune + self.result.draws * self.result.thin
        return self.result.n_iter

    @property
    def support(self) -> pd.Index | None:
        """EM / ECME: labels of the training rows that are support vectors (``y f <= 1``, on or inside
        the margin); ``None`` for the Bayesian engines, where every row has a posterior weight."""
        if not self.posterior.point:
            return None
        return self.model.design.row_index[self.result.support]

    # ----- imputation ---------------------------------------------------------------
    def imputation_report(self):
        """What ``missing="impute"`` imputed (see :class:`bayesvm.results.imputation.ImputationReport`)."""
        if self.model.design.imputation is None:
            raise BayesvmError("imputation_report() needs a fit with missing='impute' and missing predictor values")
        from .imputation import build_report

        return build_report(self)

    def plot_imputation(self, ax=None):
        """Histograms of observed values and imputed posterior means (:func:`bayesvm.results.imputation.plot_imputation`)."""
        if self.model.design.imputation is None:
            raise BayesvmError("plot_imputation() needs a fit with missing='impute' and missing predictor values")
        from .imputation import plot_imputation

        return plot_imputation(self, ax=ax)

    # ----- variable selection -------------------------------------------------------
    @property
    def inclusion(self) -> pd.DataFrame | None:
        """Per penalised coefficient (fits with a selection ``prior``; else ``None``), original scale:

        ``p_include``: posterior probability that the slope is in the model (Laplace-zero, spike-and-slab; from
        Gibbs, the average of each draw's ``P(gamma_k = 1 | the rest)`` where the sampler makes its exact pair
        updates, the Rao-Blackwellised estimate, and ``p_positive`` is then ``p_include`` times the share of the
        draws including the slope in which it is positive, so that the posterior mean ``fixef`` (the draws'
        average) equals ``p_include x mean_if_included`` only up to Monte Carlo error; for a lasso mode, 1 where the mode is non-zero and 0 where it is exactly 0; NaN for lasso Gibbs,
        whose prior has no mass at zero); ``p_positive``: ``P(slope > 0 | y)``; ``mean_if_included``: the
        slope's posterior mean given that it is included.
        """
        model = self.model
        if model.prior is None:
            return None
        sel = np.flatnonzero(model.penalized)
        moments = self.posterior.inclusion(sel, model.prior.point_mass)  # (what the output's form holds)
        if moments is None:
            return None
        p_include, p_positive, mean_if = moments
        mean_if = mean_if * (1.0 / model.scale[sel])  # (original scale)
        names = [self.model.design.x_names[j] for j in sel]
        # probabilities averaged over nodes, draws or chains stay in [0, 1] (rounding gave 1 + 2e-16; NaN stays)
        p_include, p_positive = np.clip(p_include, 0.0, 1.0), np.clip(p_positive, 0.0, 1.0)
        return pd.DataFrame(
            {"p_include": p_include, "p_positive": p_positive, "mean_if_included": mean_if},
            index=pd.Index(names, name="coefficient"),
        )

    @property
    def selected(self) -> list[str]:
        """Coefficients with ``p_include > 0.5`` (the median probability model; Barbieri & Berger 2004)."""
        table = self.inclusion
        if table is None:
            raise BayesvmError(
                "selected needs a fit with a selection prior (prior=LaplaceZero(), SpikeSlab(), Lasso())"
            )
        return table.index[table["p_include"] > 0.5].tolist()

    def plot_inclusion(self, ax=None, **kwargs):
        """Bar chart of inclusion probabilities shaded by ``P(slope > 0)`` (see :func:`bayesvm.plots.plot_inclusion`)."""
        from ..plots import plot_inclusion

        return plot_inclusion(self, ax=ax, **kwargs)

    # ----- coefficients --------------------------------------------------------------
    @property
    def fixef(self) -> pd.Series:
        """Posterior means of the fixed effects, on the original scale of the predictors."""
        p = self.model.design.p
        mean = self.model.fixed_transform() @ self.posterior.means()[0][:p]
        return pd.Series(mean, index=list(self.model.design.x_names), name="mean")

    @property
    def fixef_cov(self) -> pd.DataFrame:
        """Posterior covariance of the fixed effects, original scale."""
        p = self.model.design.p
        T = self.model.fixed_transform()
        cov = T @ self.posterior.fixed_cov(p) @ T.T
        names = list(self.model.design.x_names)
        return pd.DataFrame(cov, index=names, columns=names)

    def _term_moments(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """``(J, k)`` means and ``(J, k)`` marginal SDs of random-effect term ``t``."""
        term = self.model.design.re_terms[t]
        (mean_d, mean_b), (var_d, var_b) = self.posterior.means(), self.posterior.variances()
        if t in self.model.blocked_terms:
            pos = self.model.blocked_offsets()[t] + np.arange(term.k)
            mean, var = mean_b[:, pos], var_b[:, pos]
        else:
            idx = self.model.dense_offsets()[t] + np.arange(term.n_levels * term.k)
            mean = mean_d[idx].reshape(term.n_levels, term.k)
            var = var_d[idx].reshape(term.n_levels, term.k)
        return mean, np.sqrt(var)

    def _ranef_frames(self, which: int) -> dict[str, pd.DataFrame]:
        frames: dict[str, pd.DataFrame] = {}
        for t, term in enumerate(self.model.design.re_terms):
            values = self._term_moments(t)[which]
            frame = pd.DataFrame(values, index=pd.Index(term.levels, name=term.group), columns=list(term.term_names))
            if term.group in frames:
                frame = pd.concat([frames[term.group], frame], axis=1)
            frames[term.group] = frame
        return frames

    @property
    def ranef(self) -> dict[str, pd.DataFrame]:
        """Posterior means of the random effects: one DataFrame (levels x terms) per grouping factor."""
        return self._ranef_frames(0)

    @property
    def ranef_sd(self) -> dict[str, pd.DataFrame]:
        """Posterior SDs of the random effects, laid out as :attr:`ranef`."""
        return self._ranef_frames(1)

    @property
    def variance_components(self) -> list[VarianceEstimate]:
        """Posterior means of the variance components (penalty variance first, if learned).

        Mean-field VB's ``q`` of a variance is inverse gamma (inverse Wishart): where its shape is at most 1 (``nu <= k
        + 1``) the mean does not exist and is NaN.  That happens to a learned penalty informed by one slope
        (``sigma_u^2 | beta ~ IG(0.51, ...)`` under the default ``IG(0.01, 0.01)``), which ``summary()`` flags; a
        sampled or integrated fit's mean of such a variance is finite but dominated by its few largest draws or nodes.
        """
        out = []
        for comp, mean in zip(self.problem.components, self.posterior.component_means()):
            if comp.source == PENALTY_SOURCE:
                out.append(VarianceEstimate("penalty", ("slopes",), mean, comp.name))
                continue
            if gp_index(comp.source) is not None:  # a gp() term: its amplitude sigma_g^2
                out.append(VarianceEstimate(comp.name, ("amplitude",), mean, comp.name))
                continue
            term = self.model.design.re_terms[comp.source]
            out.append(VarianceEstimate(term.group, term.term_names, mean, comp.name))
        return out

    @property
    def penalty_estimate(self) -> float | None:
        """Posterior mean of ``alpha = 1 / (4 sigma_u^2)`` when the penalty is learned (``E[1/sigma_u^2]/4``)."""
        for c, comp in enumerate(self.problem.components):
            if comp.source != PENALTY_SOURCE:
                continue
            return float(self.posterior.expected_precision(c)[0, 0] / 4.0)
        return None

    # ----- prediction ----------------------------------------------------------------
    def _rows(self, newdata: pd.DataFrame | None, include_random: bool) -> tuple[tuple, np.ndarray | None, tuple]:
        """``((D, codes, values), extra, new)``: ``extra`` is the variance a missing predictor adds to ``f``
        (``missing="impute"`` fits, rows with missing values; ``None`` otherwise); ``new`` is ``(unseen, z)``,
        per random-effect term the rows whose level the fit never saw and the rows' values of the term
        (empty for the training rows)."""
        model = self.model
        extra = None
        if newdata is None and model.design.X.shape[0] != model.design.n:
            raise BayesvmError("the training rows of out-of-core (dask) data are not in memory: pass newdata")
        if newdata is None:
            D, blocked = self.problem.D, self.problem.blocked
            if not include_random:
                keep = np.zeros(D.shape[1])
                keep[: model.design.p] = 1.0
                for term, start in zip(model.design.gp_terms, model.gp_offsets()):  # g(x) is not a group effect
                    keep[start : start + term.n_basis] = 1.0
                D = D @ sp.diags(keep) if sp.issparse(D) else D * keep
                blocked = None
            if model.design.imputation is not None:  # VB: Cov(z_i); Gibbs: the draws' variances
                z_cov = self.result.z_cov
                if z_cov is None:
                    from .imputation import imputation_moments

                    z_sd = imputation_moments(self)[1]
                    z_cov = z_sd[:, :, None] * np.eye(z_sd.shape[1]) * z_sd[:, None, :]
                extra = self._imputation_variance(z_cov)
            new_levels: tuple = ((), ())
        else:
            new = model.design.rematerialize(newdata, include_random=include_random)
            new_levels = (tuple(codes < 0 for codes in new.codes), tuple(new.values)) if include_random else ((), ())
            D, blocked = model.new_inputs(new)
            if new.imputation_values is not None and np.isnan(new.imputation_values).any():
                from .imputation import conditional_imputation

                z, cov = conditional_imputation(self, new.imputation_values)
                _, _, alpha, gamma = model.imputation_scaling()
                D = D.copy()
                D[:, list(model.design.imputation.x_columns)] = alpha + gamma * z
                extra = self._imputation_variance(cov)
        codes = None if blocked is None else blocked.codes
        values = None if blocked is None else blocked.values
        return (D, codes, values), extra, new_levels

    def _imputation_variance(self, z_cov: np.ndarray) -> np.ndarray:
        """``tr(E[b b'] Cov(z_i))`` per row: the variance of ``f`` from the unknown predictors, ``b = gamma o theta_K``."""
        _, _, _, gamma = self.model.imputation_scaling()
        cols = np.asarray(self.model.design.imputation.x_columns)
        mean = self.posterior.means()[0][cols]
        cov = self.posterior.fixed_cov(self.model.design.p)[np.ix_(cols, cols)]
        second = np.outer(gamma, gamma) * (cov + np.outer(mean, mean))
        return np.einsum("jk,ijk->i", second, z_cov)

    def _new_level_law(self, new_levels: tuple):
        """Quadrature of the variance the new levels' random effects add (:mod:`bayesvm.results.new_levels`)."""
        unseen, z = new_levels
        if not unseen or not any(mask.any() for mask in unseen):
            return None
        from .new_levels import new_level_variance

        component_of = {comp.source: c for c, comp in enumerate(self.problem.components) if comp.source >= 0}
        laws = [self.posterior.component_law(component_of[t]) if mask.any() else None for t, mask in enumerate(unseen)]
        return new_level_variance(laws, list(unseen), list(z))

    def _link_mean(self, newdata, include_random: bool) -> np.ndarray:
        """The posterior mean of ``f`` at the rows, without their variances."""
        return self.posterior.link_mean(*self._rows(newdata, include_random)[0])

    def _predictive(self, newdata, include_random: bool, new_levels: str):
        """Posterior ``(mean, var)`` of ``f`` (imputation variance included), the new-level law and the rows."""
        rows, extra, new = self._rows(newdata, include_random)
        mean, var = self.posterior.link(*rows, training=newdata is None and include_random)
        if extra is not None:
            var = var + extra
        law = self._new_level_law(new) if new_levels == "integrate" else None
        return mean, var, law, rows, extra

    def _pseudo(self, mean, var, law, rows, extra) -> np.ndarray:
        """The normalised pseudo-likelihood averaged over the posterior of ``f`` (``kind="pseudo"``)."""
        from .prediction import gaussian_average_probability

        if law is not None:
            values, weights = law
            return np.clip(
                sum(w * gaussian_average_probability(mean, var + values[:, j]) for j, w in enumerate(weights)), 0.0, 1.0
            )
        # a Gaussian q(f), or f with the missing predictors integrated out: Gaussian in f
        if self.posterior.gaussian_link or (extra is not None and np.any(extra > 0)):
            return gaussian_average_probability(mean, var)
        return self.posterior.probability(*rows)

    def gp_effect(
        self, term: str | None = None, newdata: pd.DataFrame | None = None, points: int = 100, level: float = 0.95
    ) -> pd.DataFrame:
        """The fitted function of a ``gp()`` term with its credible band
        (:func:`bayesvm.results.gp_effect.gp_effect`)."""
        from .gp_effect import gp_effect

        return gp_effect(self, term=term, newdata=newdata, points=points, level=level)

    # ----- reporting -----------------------------------------------------------------
    def summary(self, level: float = 0.95, detail: bool = False):
        """lme4-style summary; ``str()`` of the returned object prints it.

        Parameters
        ----------
        level
            Credible level of the intervals.
        detail
            Also the engine's own report (for the accurate fit: its lattice over the variance parameters, how its
            nodes were weighted, what the PSIS check corrected)."""
        from .summary import build_summary

        return build_summary(self, as_level(level), as_flag(detail, "detail"))

    def conf_int(self, level: float = 0.95) -> pd.DataFrame:
        """Credible intervals of the fixed effects at ``level`` (original scale), one row per coefficient and the
        quantiles as columns: ``summary(level).fixed``'s interval, as statsmodels' ``conf_int()`` and lme4's
        ``confint()`` give theirs."""
        table = self.summary(level).fixed
        return table[[column for column in table.columns if str(column).endswith("%")]]

    def __repr__(self) -> str:
        detail = f", lower bound {self.lower_bound[-1]:.4f}" if self.lower_bound.size else ""
        return f"<BSVMFit {self.method} ({self.posterior.kind}): {self.formula!r}, n={self.model.design.n}{detail}>"

    def inference_groups(self, draws: int, seed: int | None, log_likelihood: bool) -> dict:
        from .arviz import linear_groups

        return linear_groups(self, draws, seed, log_likelihood)
