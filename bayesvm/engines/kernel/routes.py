"""The routes of the kernel family and the PCVM (:mod:`bayesvm.engines.registry`).

Kernel SVM (``bsvm(..., kernel=...)``, a Gaussian process on the inputs):

- VB: Wenzel et al. (2017), the full-batch fit (section 4.1) or the inducing-point fit (section 4.2), each learning
  the kernel's hyperparameters by maximising its lower bound (ML-II); ``vb="accurate"``: EP on the whitened features
  (:mod:`bayesvm.engines.kernel.features`) at those hyperparameters;
- SVI: stochastic VB on minibatches (section 4.5);
- Gibbs and EM: the linear engines on the whitened features, the hyperparameters fixed (learned first by VB's ML-II
  where the kernel learns any).

PCVM (``pcvm()``, Chen, Tino & Yao): ``"laplace"`` (the incremental selection with a Laplace approximation, eqs.
3-4), ``"ep"`` (the same selection, then EP for the selected weights, section II-D) and ``"em"`` (the top-down EM
PCVM).

Each ``run_*`` takes ``(model, request)`` and returns an :class:`bayesvm.engines.runs.EngineRun`.
"""

from __future__ import annotations

import time

import numpy as np

from ...errors import ConvergenceWarning
from ..runs import EngineRun, bound_decreased, iterations_stopped

#: Training rows (evenly spaced) whose decision values a kernel Gibbs fit reports R-hat and ESS for
CHECKED_ROWS = 25


def supports(model, request) -> str | None:
    """Why a kernel route cannot fit ``model`` as ``request`` asks (None where it can)."""
    control = request.control
    if request.vb == "accurate" and request.method != "vb":
        return f"vb='accurate' goes with method='vb', not {request.method!r}"
    if request.method == "gibbs" and isinstance(control.draws, str):
        return (
            "draws='auto' runs the linear and mixed-model Gibbs sampler; a kernel fit takes a number of draws (its "
            "warning says how many more to run)"
        )
    if control.learn_inducing and (request.method == "svi" or isinstance(control.inducing, str)):
        return "learn_inducing=True needs method='vb' with inducing points (not 'all')"
    return None


def run_vb(model, request) -> EngineRun:
    """Wenzel et al.'s VB (ML-II hyperparameters); with ``vb="accurate"``, EP on the whitened features at them."""
    if request.vb == "accurate":
        return _run_on_features(model, request, "accurate")
    problem = model.problem()
    result = _learned(model, problem, request.control)
    return EngineRun(result, problem, warnings=_vb_warnings(result))


def run_svi(model, request) -> EngineRun:
    """SVI on minibatches of rows (Wenzel et al. 2017, section 4.5); out of core, the minibatches are drawn partition
    by partition (``request.rows``)."""
    from .svi import fit_svi

    problem, control = model.problem(), request.control
    locations = model.locations if model.locations is not None else problem.X
    batches = None
    if request.rows is not None:
        batches = request.rows.minibatches(lambda new, model=model: model.inputs(new.X), control.batch_size)
    result = fit_svi(problem, locations, batch_size=control.batch_size, max_iter=control.max_iter, tol=control.tol,
                     learning_rate=control.learning_rate, seed=request.seed, batches=batches)  # fmt: skip
    return EngineRun(result, problem, warnings=_vb_warnings(result))


def run_gibbs(model, request) -> EngineRun:
    """The linear Gibbs sampler on the whitened features (the exact posterior of ``v`` given the hyperparameters)."""
    return _run_on_features(model, request, "gibbs")


def run_em(model, request) -> EngineRun:
    """The linear EM on the whitened features: the posterior mode of ``v`` given the hyperparameters."""
    return _run_on_features(model, request, "em")


def _learned(model, problem, control):
    """The VB fit that learns the kernel's hyperparameters (and the inducing locations with ``learn_inducing``):
    full batch for ``inducing="all"``, else at the model's inducing locations."""
    from .vb import fit_batch, fit_inducing

    if model.locations is None:
        return fit_batch(problem, tol=control.tol, max_iter=control.max_iter)
    return fit_inducing(problem, model.locations, tol=control.tol, max_iter=control.max_iter,
                        learn_locations=control.learn_inducing)  # fmt: skip


def _vb_warnings(result) -> list[tuple[str, type[Warning]]]:
    """A VB or SVI kernel fit that stopped early (a hyperparameter search that failed cannot be trusted; SVI's window
    rule unmet), and a lower bound that decreased."""
    out = []
    if not result.converged:
        message = (
            f"the kernel fit cannot be trusted: {result.stopping}"
            if result.stopping and result.engine != "svi"
            else f"the kernel fit stopped before converging ({result.stopping or 'max_iter reached'}); increase max_iter"
        )
        out.append((message, ConvergenceWarning))
    if result.decreases:
        out.append(bound_decreased(result.decreases, "iteration"))
    return out


def _run_on_features(model, request, engine: str) -> EngineRun:
    """Gibbs, EM or accurate VB on the whitened features at fixed hyperparameters and locations: the model's where it
    learns none, else those of the VB fit that learns them (its time included in the result's)."""
    problem, control = model.problem(), request.control
    kernel, source, seconds, warned = model.kernel, "", 0.0, []
    locations = model.locations if model.locations is not None else problem.X
    if model.kernel.log_params().size or control.learn_inducing:
        learned = _learned(model, problem, control)
        warned = _vb_warnings(learned)
        kernel, locations, source, seconds = learned.kernel, learned.locations, learned.engine, learned.elapsed
    result, more = _features_fit(problem, kernel.fixed(), locations, engine, request, source, model.locations is None,
                                 seconds)  # fmt: skip
    return EngineRun(result, problem, warnings=warned + more)


def _features_fit(problem, kernel, locations, engine: str, request, source: str, batch: bool, learning_seconds: float):
    """The linear engine's fit of the feature problem (:func:`bayesvm.engines.kernel.features.feature_problem`) as a
    kernel result with the moments of ``v`` (``source``: the VB engine that learned the hyperparameters, ``""`` when
    given; ``batch``: the locations are the training inputs; ``learning_seconds``: that VB fit's time), and its
    warnings.  Its ``lower_bound`` is empty: only
    the VB engines compute one."""
    from ..chain_checks import draw_diagnostics
    from ..linear.em import fit_em
    from ..linear.ep import accurate_failure, fit_accurate
    from ..linear.gibbs import sample_gibbs
    from .features import feature_problem, kernel_jitter
    from .vb import KernelVBResult

    control = request.control
    jitter = kernel_jitter(kernel, locations)
    features = feature_problem(problem, kernel, locations, jitter)
    m = features.D.shape[1]
    diagnostics, warned = None, []
    if engine == "gibbs":
        linear = sample_gibbs(features, seed=request.seed, draws=control.draws, tune=control.tune,
                              chains=control.chains, thin=control.thin, cores=control.cores,
                              progress=control.progress)  # fmt: skip
        draws = linear.theta_d.reshape(-1, m)
        converged, n_iter = True, int(linear.theta_d.shape[1])
        rows = np.unique(np.linspace(0, problem.n - 1, min(problem.n, CHECKED_ROWS)).astype(int))
        diagnostics = draw_diagnostics(linear.theta_d @ features.D[rows].T, [f"f[row {i + 1}]" for i in rows])
        mean, cov = draws.mean(axis=0), np.atleast_2d(np.cov(draws, rowvar=False))
    elif engine == "em":
        linear = fit_em(features, tol=control.tol, max_iter=20000)
        mean, cov = linear.theta_d[:m], np.zeros((m, m))  # a mode: v has no spread
        converged, n_iter = bool(linear.converged), int(linear.n_iter)
        if not converged:
            warned.append(iterations_stopped("EM", n_iter))
    else:
        linear = fit_accurate(features)
        mean, cov = linear.fixed_moments(m)
        converged, n_iter = bool(linear.converged), int(linear.n_iter)
        if not converged:
            warned.append((accurate_failure(linear), ConvergenceWarning))
    result = KernelVBResult(
        kernel=kernel, locations=locations, jitter=jitter, mean=np.asarray(mean, dtype=float), cov=cov, chi=None,
        lower_bound=np.zeros(0), converged=converged, n_iter=n_iter, elapsed=linear.elapsed + learning_seconds,
        engine=engine,
        hyperparameters_from=source, chain_diagnostics=diagnostics, batch_locations=batch,
        weight_draws=linear.theta_d if engine == "gibbs" else None,
        log_posterior=linear.log_posterior if engine == "gibbs" else None,
    )  # fmt: skip
    return result, warned


# ----- the PCVM --------------------------------------------------------------------------------------------------
def _pcvm_basis(model, problem) -> np.ndarray:
    """``Phi = [1, K(X, X) diag(y)]``: the bias column and one label-signed basis function per training row."""
    X, y = problem.X, problem.y
    return np.column_stack([np.ones(len(X)), model.kernel.matrix(X, X) * y[None, :]])


def run_pcvm_laplace(model, request) -> EngineRun:
    """The incremental selection with a Laplace approximation at every step (eqs. 3-4)."""
    return _run_pcvm(model, request, "laplace")


def run_pcvm_ep(model, request) -> EngineRun:
    """The incremental selection, then EP for the posterior of the selected weights (section II-D), with the
    leave-one-out error estimate (eq. 9)."""
    return _run_pcvm(model, request, "ep")


def run_pcvm_em(model, request) -> EngineRun:
    """The original PCVM's top-down EM from every training row as a basis function (:mod:`.pcvm_em`)."""
    return _run_pcvm(model, request, "em")


def _run_pcvm(model, request, approximation: str) -> EngineRun:
    from .pcvm import BIAS_PRECISION, PCVMResult, fit_pcvm_ep, fit_pcvm_laplace
    from .pcvm_em import fit_pcvm_em

    start = time.perf_counter()
    problem = model.problem()
    Phi = _pcvm_basis(model, problem)
    max_iter = request.control.max_iter
    if approximation == "em":
        selected = fit_pcvm_em(Phi, problem.y, max_iter=max_iter, seed=request.seed)
    else:
        selected = fit_pcvm_laplace(Phi, problem.y, max_iter=max_iter)
    mean, cov, loo = selected.mean, selected.cov, None
    if approximation == "ep":
        columns = [0] + [1 + j for j in selected.active]
        ep = fit_pcvm_ep(Phi[:, columns], problem.y, np.concatenate([[BIAS_PRECISION], selected.alpha]))
        mean, cov, loo = ep.mean, ep.cov, ep.loo_error
    result = PCVMResult(
        kernel=model.kernel, centres=problem.X[selected.active], centre_labels=problem.y[selected.active],
        active=selected.active, alpha=selected.alpha, mean=mean, cov=cov, approximation=approximation, loo_error=loo,
        n_iter=selected.n_iter, converged=selected.converged, elapsed=time.perf_counter() - start,
    )  # fmt: skip
    return EngineRun(result, problem)
