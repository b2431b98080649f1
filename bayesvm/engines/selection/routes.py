"""The routes of the selection family (:mod:`bayesvm.engines.registry`): a selection prior on the slopes.

- VB: EP with a site per slope (:mod:`bayesvm.engines.selection.ep`) where ``vb="accurate"`` asks or the default chooses
  it (:func:`bayesvm.engines.defaults.default_selection_vb`; the default falls back to mean-field VB where EP fails or
  does not converge, and says so), else the prior's mean-field VB (Laplace-zero: Luts & Ormerod 2014, Alg. 3;
  spike-and-slab: Carbonetto & Stephens' factors; the lasso: its scale-mixture VB).
- EM / ECME: the lasso's posterior mode.
- Gibbs: the prior's sampler (Appendix B; Polson & Scott 2011, sections 4.1-4.2) with its model-space moves.
- SVI: the selection prior's stochastic VB.

Out of core (a dask frame), the prior's mean-field VB by passes over the partitions and its SVI on their minibatches,
every random-effect term in the dense columns.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...errors import ConvergenceWarning
from ...model import all_dense
from ..defaults import default_selection_vb
from ..linear.routes import (
    STREAMED_DENSE,
    engine_run,
    reported_quantities,
    sampler_settings,
    streamed_rows,
    streamed_warnings,
    supports_svi,
    svi_settings,
    svi_warnings,
)
from ..linear.routes import supports_streamed as supports_streamed_linear
from ..runs import bound_decreased, iterations_stopped, sweeps_stopped
from .laws import law_of

#: The refusal where a selection prior has nothing to select.
NO_SLOPE = "the selection prior has no slope to act on: every fixed-effect column is unpenalized"


def supports(model, request) -> str | None:
    """A selection prior needs a penalised slope to act on."""
    return None if model.penalized.any() else NO_SLOPE


def run_gibbs(model, request):
    """The prior's Gibbs sampler, watching the fixed effects, the inclusion draws and the components' SDs where
    ``draws="auto"``."""
    from .gibbs import sample_selection

    result = sample_selection(
        model.selection_problem(), monitor=reported_selection_quantities(model), **sampler_settings(request)
    )
    return engine_run(result, model.problem())


def reported_selection_quantities(model):
    """What ``draws="auto"`` watches under a selection prior: the fixed effects on the original scale, the
    inclusion probabilities' draws (Rao-Blackwellised where the sampler keeps them, else the indicators) and every
    component's SDs (what ``summary()`` reports)."""
    fixed_and_sds = reported_quantities(model)

    def monitor(coef, include, components):
        return np.concatenate([fixed_and_sds(coef, components), include.astype(float)], axis=-1)

    return monitor


def run_vb(model, request):
    """EP with a site per slope, or the prior's mean-field VB (module docstring)."""
    from ..hyper_grid import AccurateFitError
    from ..linear.ep import accurate_failure
    from .ep import fit_selection_accurate

    problem = model.selection_problem()
    chosen, why = (request.vb, None) if request.vb is not None else default_selection_vb(model)
    if chosen == "accurate":
        try:
            result = fit_selection_accurate(problem, stop_at_failure=request.vb is None)  # (the default falls back)
        except AccurateFitError as exc:
            if request.vb is not None:
                raise
            result, why = None, f"{exc}; fell back"
        if result is not None and not result.converged and request.vb is None:
            result, why = None, f"{accurate_failure(result)}; fell back"
        if result is not None:
            warned = [] if result.converged else [(accurate_failure(result), ConvergenceWarning)]
            floored = floored_sites_warning(model, [result])
            return engine_run(result, model.problem(), warned=warned + floored)
    control = request.control
    result = law_of(model.prior).mean_field(problem, tol=control.tol, max_iter=control.max_iter)
    # (max_iter bounds each coordinate ascent: a model search runs several, so result.n_iter may exceed it)
    stopped = [] if result.converged else [sweeps_stopped("VB", control.max_iter, control.tol)]
    decreased = [bound_decreased(result.decreases)] if getattr(result, "decreases", None) else []
    return engine_run(result, model.problem(), why, stopped + decreased)


def run_em(model, request):
    """The prior's posterior mode (the lasso's by EM / ECME); a prior whose record does not list ``"em"`` among its
    methods is refused before (:func:`bayesvm.combinations.check_prior_method`: no mode exists under a point mass)."""
    control = request.control
    result = law_of(model.prior).mode(model.selection_problem(), tol=control.tol, max_iter=control.max_iter)
    return engine_run(result, model.problem(), warned=iteration_warnings(result, "EM"))


def iteration_warnings(result, what: str) -> list[tuple[str, type[Warning]]]:
    """What an iterative selection fit's result calls for: a run that stopped before converging, a lower bound that
    decreased."""
    out = [] if result.converged else [iterations_stopped(what, result.n_iter)]
    if getattr(result, "decreases", None):
        out.append(bound_decreased(result.decreases))
    return out


def floored_sites_warning(model, results) -> list[tuple[str, type[Warning]]]:
    """The warning for slopes whose EP site precision had to be held at 0 (a negative one made q improper)."""
    from .ep import floored_slopes

    culprits = floored_slopes(model, results)
    if not culprits:
        return []
    return [
        (
            f"accurate VB: the EP sites of {', '.join(culprits)} could not match their tilted moments (a negative "
            "site precision made q improper, so it was held at 0): the approximation is off, for those slopes most; "
            "check the inclusion probabilities with method='gibbs'",
            ConvergenceWarning,
        )
    ]


def supports_selection_svi(model, request) -> str | None:
    return supports_svi(model, request) or supports(model, request)


def run_svi(model, request):
    """The selection prior's SVI, on one dense ``q``."""
    from .svi import fit_selection_svi

    tol, max_iter, options = svi_settings(request)
    model = all_dense(model, "method='svi' keeps one dense q")
    result = fit_selection_svi(model.selection_problem(), max_iter=max_iter, tol=tol, seed=request.seed, **options)
    return engine_run(result, model.problem(), warned=svi_warnings(result), model=model)


# ----- out-of-core data (request.rows: the partitions of a dask frame) -------------------------------------------
def supports_streamed(model, request) -> str | None:
    """Out of core a selection prior is fitted by mean-field VB or SVI (one dense ``q`` over every coefficient)."""
    if request.vb == "accurate":
        return (
            "out of core a selection prior is fitted by mean-field VB or SVI, not vb='accurate': its accurate fit (EP "
            "with a site per slope) runs on in-memory data"
        )
    return supports_streamed_linear(model, request) or supports(model, request)


def _streamed_problem(model):
    """The selection problem of a streamed model: every random-effect term in the dense columns, and the slab's or
    lasso's scale from each column's SD over every row (the streamed design's moments, as in memory)."""
    model = all_dense(model, STREAMED_DENSE)
    problem = model.selection_problem()
    if model.prior.scaled_by_predictor_sd:
        sd = model.design.column_moments()[1][problem.selected] / model.scale[problem.selected]
        problem = replace(problem, prior_scale=np.where(sd > 0, sd, 1.0))
    return model, problem


def run_streamed_vb(model, request):
    """The prior's VB with one pass over the partitions per sweep (:mod:`bayesvm.engines.selection.stream_vb`)."""
    from .stream_vb import fit_streamed_selection_vb

    control = request.control
    model, problem = _streamed_problem(model)
    sweep = request.rows.sweep(streamed_rows(model))
    result = fit_streamed_selection_vb(problem, sweep, tol=control.tol, max_iter=control.max_iter)
    decreased = [bound_decreased(result.decreases)]
    warned = streamed_warnings(result) + (decreased if result.decreases else [])
    return engine_run(result, model.problem(), warned=warned, model=model)


def run_streamed_svi(model, request):
    """The prior's SVI on minibatches drawn partition by partition."""
    from .svi import fit_selection_svi

    control = request.control
    model, problem = _streamed_problem(model)
    batches = request.rows.minibatches(streamed_rows(model), control.batch_size)
    result = fit_selection_svi(problem, batch_size=control.batch_size, max_iter=control.max_iter, tol=control.tol,
                               learning_rate=control.learning_rate, seed=request.seed, batches=batches)  # fmt: skip
    return engine_run(result, model.problem(), warned=streamed_warnings(result), model=model)
