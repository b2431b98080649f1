"""The routes of the linear family (:mod:`bayesvm.engines.registry`): fixed effects with a normal or learned-penalty
prior and random-effect terms, no selection prior, no imputed predictors.

- VB: the accurate fit (EP for ``theta`` given the variance components, integrated over them:
  :mod:`bayesvm.engines.linear.ep`) where ``vb="accurate"`` asks or the default chooses it
  (:func:`bayesvm.engines.defaults.default_vb`); with a learned penalty past its rows for one other variance, or
  beside two or more other variance parameters (:func:`bayesvm.engines.defaults.default_penalty_from_slopes`), the
  accurate fit with the penalty's variance integrated from the slopes' posterior where that is exact enough
  (:mod:`bayesvm.engines.linear.penalty_from_slopes`); else the whole lattice where the default chooses it, or
  mean-field VB (Luts & Ormerod 2014, Alg. 1-2).  The default falls back to mean-field VB where EP fails everywhere,
  and says so.
- EM / ECME: the posterior mode (Alg. 1's mode; with a fixed penalty, scikit-learn's ``SVC``).
- Gibbs: the data-augmentation sampler (Polson & Scott 2011; Appendix A) with its mixing moves.
- SVI: stochastic mean-field VB on minibatches (Wenzel et al. 2017, section 4.5).

Out of core (a dask frame): mean-field VB by one pass over the partitions per sweep, the largest grouping factor
streamed level by level (:mod:`bayesvm.engines.linear.stream_vb`), and SVI on minibatches drawn partition by partition.

Each ``run_*`` takes ``(model, request)`` and returns an :class:`bayesvm.engines.registry.EngineRun`; the engines
are imported when a route runs (a fit loads only its own).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from ...arguments import iteration_defaults
from ...combinations import check_sampling
from ...errors import ConvergenceWarning, ScaleWarning
from ...model import all_dense
from ..defaults import default_penalty_from_slopes, default_vb
from ..runs import EngineRun, bound_decreased, iterations_stopped, sweeps_stopped

#: ``warnings.warn``'s stack level for a warning a helper of a route's run says before its engine starts: the helper
#: (1), the route's ``run_*`` (2), the driver (3), ``bsvm()`` (4), the user's call (5).
EARLY_WARNING_STACKLEVEL = 5


def engine_run(result, problem, vb_note=None, warned=(), model=None) -> EngineRun:
    """The :class:`bayesvm.engines.runs.EngineRun` of a route."""
    return EngineRun(result, problem, vb_note, list(warned), model)


def vb_warnings(result, tol, max_iter) -> list[tuple[str, type[Warning]]]:
    """What a mean-field VB result calls for: a run that stopped at ``max_iter``, and a lower bound that decreased
    (numerical trouble: the bound of Alg. 1-2 never decreases in exact arithmetic)."""
    return ([] if result.converged else [sweeps_stopped("VB", max_iter, tol)]) + (
        [bound_decreased(result.decreases)] if result.decreases else []
    )


def supports_vb(model, request) -> str | None:
    """The accurate fit integrates at most six variance hyperparameters (:func:`bayesvm.engines.linear.ep.scope_refusal`;
    ``vb=None`` chooses mean-field VB beyond).  Probes estimate mean-field VB's variance terms on the sparse path
    (:mod:`bayesvm.linalg.probes`): the accurate fit has none to estimate, and a dense layout is solved exactly at
    little cost."""
    if request.vb == "accurate":
        reason = accurate_refusal(model)
        if reason is not None:
            return reason
    if request.control.probes is None:
        return None
    if request.vb == "accurate":
        return (
            "probes apply to mean-field VB of linear models on complete in-memory data (method='vb', vb=None or "
            "'meanfield'; no kernel, selection prior or missing='impute')"
        )
    if not model.sparse:
        return (
            "probes apply to the sparse path (grouping factors with more than 2000 coefficients outside the "
            "largest); this model is solved exactly at little cost, so leave probes=None"
        )
    return None


def accurate_refusal(model) -> str | None:
    """Why the accurate fit cannot take ``model``'s variance components, before any engine runs."""
    from .ep import scope_refusal

    return scope_refusal(model.variance_components())


def supports_em(model, request) -> str | None:
    """EM maximises, so each variance component's prior must vanish at 0 (:func:`bayesvm.engines.linear.em.modal_refusal`
    names the components whose prior does not)."""
    from .em import modal_refusal

    return modal_refusal(model.variance_components())


def say_if_compiling(accurate: bool) -> None:
    """Say once, on standard error, that this fit compiles its row loops for this machine (the first fit after
    install: seconds, where later processes load them from numba's disk cache): the mean-field rows and the end-of-fit
    check's level integrals, and EP's tilted moments for the accurate fit."""
    from ...engines import hinge_levels
    from ...linalg import compiled, dense_rows
    from .. import hinge_sites
    from . import compiled_rows

    if not compiled_rows.available():
        return
    used = [dense_rows.level_rows_predictor, hinge_levels.draws_log_integral_sums]
    used += [hinge_sites.tilted_rows] if accurate else []
    if not all(compiled.on_disk(function) for function in used):
        compiled.say_once(
            "vb",
            "compiling the fit's row loops for this machine; this happens once (numba keeps the compiled code on disk "
            "for later fits)",
        )


def run_vb(model, request):
    """The accurate fit or mean-field VB (module docstring)."""
    from ..hyper_grid import AccurateFitError
    from .ep import accurate_failure, fit_accurate
    from .vb import fit_vb

    control = request.control
    problem = model.problem()
    if control.probes is not None:
        seed = 0 if request.seed is None else int(request.seed)
        problem = replace(problem, probes=int(control.probes), probe_seed=seed)
    chosen, why = (request.vb, None) if request.vb is not None or control.probes is not None else default_vb(problem)
    say_if_compiling(accurate=chosen == "accurate" or request.vb is None)
    if request.nodes is not None:  # cross-fitting's fold fit of an accurate fit: EP at the full fit's nodes
        chosen, why = "accurate", None
    elif request.vb in (None, "accurate") and control.probes is None and default_penalty_from_slopes(problem):
        from .penalty_from_slopes import fit_penalty_from_slopes

        try:
            result, declined = fit_penalty_from_slopes(problem, progress=control.progress)
        except AccurateFitError as exc:  # (EP failed at every value: the fallback below says so)
            result, declined = None, str(exc)
        if result is not None:
            return engine_run(result, problem)
        if request.vb is None and chosen != "accurate":  # (where the whole lattice follows, it is the exact route)
            why = f"{why}, and there {declined}"
    if chosen == "accurate":
        try:
            result = fit_accurate(problem, given=request.nodes, progress=control.progress)
        except AccurateFitError as exc:
            if request.vb is not None:
                raise
            why = f"{exc}; fell back"
        else:
            failure = [] if result.converged else [(accurate_failure(result), ConvergenceWarning)]
            return engine_run(result, problem, warned=failure)
    warn_oversized(problem)
    result = fit_vb(problem, tol=control.tol, max_iter=control.max_iter)
    return engine_run(result, problem, why, vb_warnings(result, control.tol, control.max_iter))


def warn_oversized(problem) -> None:
    """Warn before an exact sparse fit whose crossed factors leave a dense complement too large to factorise
    densely: the general sparse factorisation then takes hours, where ``probes`` takes minutes."""
    from ...linalg.schur import oversized_dense_complement

    if problem.probes is not None or not problem.is_sparse or problem.elimination is not None:
        return
    largest = max(problem.components, key=lambda c: c.index.size)
    q = oversized_dense_complement(problem.D, largest.index)
    if q is not None:
        warnings.warn(
            f"the grouping factors are crossed: after the largest one, a dense {q}-column complement remains, too "
            "large to factorise densely; the exact fit will be very slow (hours). probes=32 estimates the "
            "variances without a factorisation (minutes; see the README's Large data section)",
            ScaleWarning,
            stacklevel=EARLY_WARNING_STACKLEVEL,
        )


def run_em(model, request):
    """The posterior mode by EM / ECME."""
    from .em import fit_em

    control = request.control
    problem = model.problem()
    result = fit_em(problem, tol=control.tol, max_iter=control.max_iter)
    stopped = [] if result.converged else [iterations_stopped("EM", result.n_iter)]
    return engine_run(result, problem, warned=stopped)


def run_gibbs(model, request):
    """The Gibbs sampler, watching the fixed effects and the components' SDs where ``draws="auto"``."""
    from .gibbs import sample_gibbs

    problem = model.problem()
    result = sample_gibbs(problem, monitor=reported_quantities(model), **sampler_settings(request))
    return engine_run(result, problem)


def sampler_settings(request) -> dict:
    """The sampling settings of a Gibbs route (draws, tuning, chains, thinning, seed, processes, progress), checked."""
    control = request.control
    check_sampling(control.draws, control.tune, control.chains, control.thin, control.cores)
    return {"draws": control.draws, "tune": control.tune, "chains": control.chains, "thin": control.thin,
            "seed": request.seed, "cores": control.cores, "progress": control.progress}  # fmt: skip


def reported_quantities(model):
    """What ``draws="auto"`` watches: the fixed effects on the original scale and every component's SDs, the
    quantities ``summary()`` reports R-hat and ESS for."""
    p = model.design.p
    transform = model.fixed_transform()

    def monitor(theta_d, components):
        parts = [theta_d[..., :p] @ transform.T]
        parts += [np.sqrt(np.diagonal(c, axis1=-2, axis2=-1)) for c in components]
        return np.concatenate(parts, axis=-1)

    return monitor


def supports_svi(model, request) -> str | None:
    """SVI is stochastic mean-field VB: it is not the accurate fit."""
    if request.vb == "accurate":
        return (
            "method='svi' is stochastic mean-field VB and vb='accurate' asks for expectation propagation instead: "
            "they are two different fits; use method='vb', vb='accurate' or method='svi' alone"
        )
    return None


def svi_settings(request) -> tuple[float, int, dict]:
    """``(tol, max_iter, {batch_size, learning_rate})`` of an SVI route, validated."""
    control = request.control
    tol, max_iter = control.tol, control.max_iter
    iteration_defaults("svi", tol, max_iter, control.batch_size, vb_max_iter=max_iter)
    return tol, max_iter, {"batch_size": control.batch_size, "learning_rate": control.learning_rate}


def svi_warnings(result) -> list[tuple[str, type[Warning]]]:
    return [] if result.converged else [(f"SVI stopped before converging ({result.stopping})", ConvergenceWarning)]


def run_svi(model, request):
    """SVI on one dense ``q`` over every coefficient (Wenzel et al. 2017, section 4.5)."""
    from .svi import fit_linear_svi

    tol, max_iter, options = svi_settings(request)
    model = all_dense(model, "method='svi' keeps one dense q")
    problem = model.problem()
    result = fit_linear_svi(problem, max_iter=max_iter, tol=tol, seed=request.seed, **options)
    return engine_run(result, problem, warned=svi_warnings(result), model=model)


# ----- out-of-core data (request.rows: the partitions of a dask frame) -------------------------------------------
#: Why out-of-core SVI and the selection priors move every random-effect term into the dense columns.
STREAMED_DENSE = "out-of-core SVI and selection priors stream the rows of one dense q"


def supports_streamed(model, request) -> str | None:
    """Out-of-core data are fitted by VB (mean-field, or the accurate fit where asked) or SVI; full-batch VB streams the
    largest grouping factor level by level and every other random-effect term as dense columns."""
    if request.method == "svi":
        return supports_svi(model, request)
    if request.method == "vb" and request.vb == "accurate" and model.prior is None:
        reason = accurate_refusal(model)
        if reason is not None:
            return reason
    if request.method == "vb" and model.prior is None and model.sparse:
        return streamed_refusal(model)
    return None


def streamed_refusal(model) -> str:
    """Why out-of-core VB cannot take this model: the random-effect terms outside the largest grouping factor exceed
    :data:`bayesvm.model.MAX_DENSE_COLUMNS` dense columns."""
    from ...model import MAX_DENSE_COLUMNS

    sizes: dict[str, int] = {}
    for term in model.design.re_terms:
        sizes[term.group] = sizes.get(term.group, 0) + term.n_levels * term.k
    largest = max(sizes, key=sizes.get)
    others = ", ".join(f"{g!r} ({size:,})" for g, size in sizes.items() if g != largest)
    return (
        f"out-of-core VB streams the largest grouping factor {largest!r} level by level and the other random-effect "
        f"terms as dense columns: {others} coefficients, more than {MAX_DENSE_COLUMNS} in all. Crossed factors of "
        "this size need the sparse structure of in-memory data (method='vb', with probes= for very many levels)"
    )


def streamed_rows(model):
    """``transform(new) -> engine rows`` of one partition: the dense columns, and the largest factor's codes and
    values where the model blocks it (:mod:`bayesvm.engines.linear.stream_vb`)."""
    if model.blocked_terms:

        def rows(new, model=model):
            factor = model.blocked_factor(new.codes, new.values)
            return model.dense_matrix(new.X, new.codes, new.values, new.gp_bases), factor.codes, factor.values

        return rows
    return lambda new, model=model: model.dense_matrix(new.X, new.codes, new.values, new.gp_bases)


def whole_levels(model) -> tuple[str, ...]:
    """The grouping columns whose every level's rows the accurate fit wants in one partition: the blocked factor's (its
    evidence is a product over levels, :mod:`bayesvm.engines.linear.stream_ep`)."""
    return model.design.re_terms[model.blocked_terms[0]].bar.group if model.blocked_terms else ()


def streamed_warnings(result) -> list[tuple[str, type[Warning]]]:
    if result.converged:
        return []
    return [(f"the fit stopped before converging ({result.stopping or 'max_iter'})", ConvergenceWarning)]


def run_streamed_vb(model, request):
    """Mean-field VB by one pass over the partitions per sweep (:mod:`bayesvm.engines.linear.stream_vb`); with
    ``vb="accurate"`` the accurate fit, EP's sites kept beside the partitions (:mod:`bayesvm.engines.linear.stream_ep`).
    Without ``vb``, mean-field: the accurate fit makes one pass over the data per EP sweep, hundreds in all."""
    from .stream_vb import fit_streamed_vb

    problem, control = model.problem(), request.control
    if request.vb == "accurate":
        from .ep import accurate_failure
        from .stream_ep import fit_streamed_accurate

        passes = request.rows.passes(streamed_rows(model), whole_levels(model))
        result = fit_streamed_accurate(
            problem, passes, request.rows.design.n, given=request.nodes, progress=request.control.progress
        )
        failure = [] if result.converged else [(accurate_failure(result), ConvergenceWarning)]
        return engine_run(result, problem, warned=failure)
    why = None if request.vb is not None else STREAMED_MEANFIELD
    sweep = request.rows.sweep(streamed_rows(model))
    result = fit_streamed_vb(problem, sweep, tol=control.tol, max_iter=control.max_iter)
    return engine_run(result, problem, why, warned=streamed_warnings(result))


#: Why ``vb=None`` fits out-of-core data by mean-field VB (``summary()`` prints it).
STREAMED_MEANFIELD = (
    "out-of-core data: the accurate fit makes one pass over the partitions per EP sweep, hundreds in all"
)


def run_streamed_svi(model, request):
    """SVI on minibatches drawn partition by partition, one dense ``q`` over every coefficient."""
    from .svi import fit_linear_svi

    control = request.control
    model = all_dense(model, STREAMED_DENSE)
    problem = model.problem()
    batches = request.rows.minibatches(streamed_rows(model), control.batch_size)
    result = fit_linear_svi(problem, batch_size=control.batch_size, max_iter=control.max_iter, tol=control.tol,
                            learning_rate=control.learning_rate, seed=request.seed, batches=batches)  # fmt: skip
    return engine_run(result, problem, warned=streamed_warnings(result), model=model)
