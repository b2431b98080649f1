"""``bsvm(..., kernel=...)``: the face's route for kernel fits (Wenzel et al. 2017 by VB or SVI; Gibbs, EM and
accurate VB on the whitened features of :mod:`bayesvm.engines.kernel.features`)."""

from __future__ import annotations

import warnings

import numpy as np

from .arguments import data_name, iteration_defaults
from .control import Control
from .errors import BayesvmError, ConvergenceWarning, IdentifiabilityWarning
from .formula.bars import parse_formula
from .formula.design import build_design
from .model.kernel import build_kernel_model
from .results.kernel_fit import KernelFit


def fit_kernel(formula, data, *, method, positive, missing, standardize, seed, kernel, penalty, prior, vb,
               control: Control, fold=None, class_weight=None) -> KernelFit:  # fmt: skip
    """``bsvm(..., kernel=...)``: Wenzel et al. (2017), sections 4.1-4.4 (``bayesvm.engines.kernel.vb``); Gibbs, EM
    and accurate VB fit the same model as a linear one on its whitened features
    (``bayesvm.engines.kernel.features``), the hyperparameters fixed (learned ones first by VB's ML-II).
    ``control``: the engine settings (:class:`bayesvm.control.Control`, settled); ``fold``: a cross-fitting fold
    fit's :class:`bayesvm.formula.design.FoldDesign`."""
    tol, max_iter, batch_size, learning_rate = control.tol, control.max_iter, control.batch_size, control.learning_rate
    inducing, inducing_method, learn_inducing = control.inducing, control.inducing_method, control.learn_inducing
    sampling = dict(draws=control.draws, tune=control.tune, chains=control.chains, thin=control.thin,
                    cores=control.cores, progress=control.progress)  # fmt: skip
    from .engines.kernel.svi import fit_svi
    from .engines.kernel.vb import fit_batch, fit_inducing

    if method not in ("vb", "svi", "gibbs", "em"):
        raise BayesvmError(f"a kernel model is fitted by method='vb', 'svi', 'gibbs' or 'em', not {method!r}")
    if penalty != "learn" or prior is not None:
        raise BayesvmError(
            "penalty= and prior= do not apply to a kernel fit: the kernel's variance is the penalty "
            "(learned when the kernel's learn includes 'variance')"
        )
    if vb == "accurate" and method != "vb":
        raise BayesvmError(f"vb='accurate' goes with method='vb', not {method!r}")
    if method == "gibbs" and sampling["draws"] == "auto":
        raise BayesvmError("draws='auto' runs the linear and mixed-model Gibbs sampler; a kernel fit takes a number of "
                           "draws (its warning says how many more to run)")  # fmt: skip
    if learn_inducing and (method == "svi" or isinstance(inducing, str)):
        raise BayesvmError("learn_inducing=True needs method='vb' with inducing points (not 'all')")
    tol, max_iter = iteration_defaults(method, tol, max_iter, batch_size, vb_max_iter=1000)
    parsed = parse_formula(formula, getattr(data, "columns", None))
    design = build_design(parsed, data, positive=positive, missing=missing, rank="keep", fold=fold)
    model = build_kernel_model(design, kernel, standardize, inducing, inducing_method, seed, class_weight)
    problem = model.problem()
    on_features = method in ("gibbs", "em") or vb == "accurate"
    kernel_fixed, hyper_source = model.kernel, ""
    locations = model.locations if model.locations is not None else problem.X
    if method == "svi":
        result = fit_svi(problem, locations, batch_size=batch_size, max_iter=max_iter, tol=tol,
                         learning_rate=learning_rate, seed=seed)  # fmt: skip
    elif on_features and not (model.kernel.log_params().size or learn_inducing):
        result = None  # nothing to learn: the features' engine runs at the given kernel
    elif model.locations is None:
        result = fit_batch(problem, tol=tol, max_iter=max_iter)
    else:
        result = fit_inducing(problem, model.locations, tol=tol, max_iter=max_iter, learn_locations=learn_inducing)
    learning_seconds = 0.0
    if result is not None:
        _warn_kernel_vb(result)
        kernel_fixed, locations, hyper_source = result.kernel, result.locations, result.engine
        learning_seconds = result.elapsed
    if on_features:
        engine = "accurate" if vb == "accurate" else method
        result = _fit_kernel_features(problem, kernel_fixed.fixed(), locations, engine, tol, seed, sampling,
                                      hyper_source, batch=model.locations is None)  # fmt: skip
        result.elapsed += learning_seconds  # (the VB fit that learned the hyperparameters included)
    fit = KernelFit(model=model, problem=problem, method=method, result=result, data_name=data_name(data), tol=tol)
    reach = fit.reach_problem()
    if reach:
        warnings.warn(reach, IdentifiabilityWarning, stacklevel=3)
    if method == "gibbs":
        from .results.diagnostics import mcmc_problems

        message = mcmc_problems(result.chain_diagnostics, sampling["chains"], sampling["draws"])
        if message:
            warnings.warn(message, ConvergenceWarning, stacklevel=3)
    return fit


#: Training rows (evenly spaced) whose decision values a kernel Gibbs fit reports R-hat and ESS for
CHECKED_ROWS = 25


def _warn_kernel_vb(result) -> None:
    if not result.converged:
        message = (
            f"the kernel fit cannot be trusted: {result.stopping}"
            if result.stopping and result.engine != "svi"
            else f"the kernel fit stopped before converging ({result.stopping or 'max_iter reached'}); increase max_iter"
        )
        warnings.warn(message, ConvergenceWarning, stacklevel=4)
    if result.decreases:
        warnings.warn(f"the lower bound decreased at iteration(s) {result.decreases[:10]}", RuntimeWarning, 4)


def _fit_kernel_features(problem, kernel, locations, engine: str, tol: float, seed, sampling: dict, hyper_source: str,
                         batch: bool):  # fmt: skip
    """Gibbs, EM or accurate VB of a kernel model on its whitened features (``bayesvm.engines.kernel.features``) at a
    fixed kernel and inducing locations (``hyper_source``: the VB engine that learned them, ``""`` when given): the
    linear engine's output turned into a kernel result with the moments of ``v``.  Its ``lower_bound`` is empty:
    only the VB engines compute one."""
    from .engines.kernel.features import feature_problem, kernel_jitter
    from .engines.kernel.vb import KernelVBResult
    from .engines.linear.em import fit_em
    from .engines.linear.ep import accurate_failure, fit_accurate
    from .engines.linear.gibbs import sample_gibbs
    from .results.diagnostics import draw_diagnostics
    from .results.posterior import posterior_view

    jitter = kernel_jitter(kernel, locations)
    features = feature_problem(problem, kernel, locations, jitter)
    m = features.D.shape[1]
    diagnostics = None
    if engine == "gibbs":
        linear = sample_gibbs(features, seed=seed, **sampling)
        draws = linear.theta_d.reshape(-1, m)
        converged, n_iter = True, int(linear.theta_d.shape[1])
        rows = np.unique(np.linspace(0, problem.n - 1, min(problem.n, CHECKED_ROWS)).astype(int))
        diagnostics = draw_diagnostics(linear.theta_d @ features.D[rows].T, [f"f[row {i + 1}]" for i in rows])
        mean, cov = draws.mean(axis=0), np.atleast_2d(np.cov(draws, rowvar=False))
    else:
        linear = fit_em(features, tol=tol, max_iter=20000) if engine == "em" else fit_accurate(features)
        view = posterior_view(linear)
        mean = view.means()[0]
        cov = np.zeros((m, m)) if engine == "em" else view.fixed_cov(m)  # a mode: v has no spread
        converged, n_iter = bool(linear.converged), int(linear.n_iter)
        if engine == "em" and not converged:
            warnings.warn(f"EM stopped after {n_iter} iterations without converging", ConvergenceWarning, 4)
        if engine == "accurate" and not converged:
            warnings.warn(accurate_failure(linear), ConvergenceWarning, 4)
    return KernelVBResult(
        kernel=kernel, locations=locations, jitter=jitter, mean=np.asarray(mean, dtype=float), cov=cov, chi=None,
        lower_bound=np.zeros(0), converged=converged, n_iter=n_iter, elapsed=linear.elapsed, engine=engine,
        hyperparameters_from=hyper_source, chain_diagnostics=diagnostics, batch_locations=batch,
        weight_draws=linear.theta_d if engine == "gibbs" else None,
        log_posterior=linear.log_posterior if engine == "gibbs" else None,
    )  # fmt: skip
