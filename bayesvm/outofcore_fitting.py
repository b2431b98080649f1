"""The out-of-core route of ``bsvm()``: a dask frame fitted by full-batch VB over its partitions or by SVI.

Full-batch VB streams the largest grouping factor level by level and the other terms as dense columns
(:mod:`bayesvm.engines.linear.stream_vb`); SVI and the selection priors stream one dense ``q`` over every
coefficient, at most :data:`bayesvm.model.MAX_DENSE_COLUMNS` of them.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from .arguments import data_name, iteration_defaults
from .combinations import check_prior_method
from .errors import BayesvmError, ConvergenceWarning
from .formula.bars import parse_formula
from .model import MAX_DENSE_COLUMNS, all_dense, build_model
from .model.kernel import build_kernel_model
from .priors import LaplaceZero, PriorSet
from .results.fit import BSVMFit
from .results.kernel_fit import KernelFit


def fit_streamed(formula, data, *, method, positive, missing, standardize, penalty, priors, tol, max_iter, seed,
                  batch_size, learning_rate, prior, vb, kernel, inducing, inducing_method) -> BSVMFit:  # fmt: skip
    """Out-of-core (dask) data: full-batch VB by one pass over the partitions per sweep, or SVI over them."""
    from .engines.batches import PartitionBatches
    from .engines.kernel.svi import fit_svi
    from .engines.linear.stream_vb import fit_streamed_vb
    from .engines.linear.svi import fit_linear_svi
    from .outofcore import build_streamed

    allowed = ("svi",) if kernel is not None else ("vb", "svi")
    if method not in allowed:
        raise BayesvmError(f"out-of-core (dask) data are fitted by method in {allowed}, not {method!r}")
    if vb == "accurate":
        raise BayesvmError(
            "out-of-core (dask) data are fitted by mean-field VB or SVI, not vb='accurate': expectation propagation "
            "keeps two site parameters for every row, and a pass over the partitions keeps no per-row state"
        )
    if prior is not None:
        if kernel is not None:
            raise BayesvmError("a selection prior selects slopes, and a kernel fit has no slopes to penalise")
        check_prior_method(prior, method, penalty, vb)
    tol, max_iter = iteration_defaults(method, tol, max_iter, batch_size, vb_max_iter=500)
    streamed = build_streamed(parse_formula(formula, getattr(data, "columns", None)), data, positive, missing)
    name = data_name(data)
    if kernel is not None:
        model = build_kernel_model(streamed.design, kernel, standardize, inducing, inducing_method, seed)
        problem = model.problem()
        locations = model.locations if model.locations is not None else problem.X
        parts = streamed.parts(lambda new, model=model: model.inputs(new.X))
        result = fit_svi(problem, locations, batch_size=batch_size, max_iter=max_iter, tol=tol,
                         learning_rate=learning_rate, seed=seed,
                         batches=lambda rng: PartitionBatches(streamed.loader(parts), streamed.counts, batch_size, rng))  # fmt: skip
        fit = KernelFit(model=model, problem=problem, method=method, result=result, data_name=name, tol=tol)
    else:
        model = build_model(streamed.design, penalty, PriorSet() if priors is None else priors, standardize,
                            prior=prior)  # fmt: skip
        if method == "vb" and prior is None and model.sparse:
            raise BayesvmError(_streamed_refusal(model))
        if method != "vb" or prior is not None:  # (the largest factor streams by level in full-batch VB only)
            model = all_dense(model, "out-of-core SVI and selection priors stream the rows of one dense q")
        problem = model.problem()
        if model.blocked_terms:  # the dense columns and the largest factor's codes and values (stream_vb)

            def rows(new, model=model):
                factor = model.blocked_factor(new.codes, new.values)
                return model.dense_matrix(new.X, new.codes, new.values, new.gp_bases), factor.codes, factor.values

            parts = streamed.parts(rows)
        else:
            parts = streamed.parts(lambda new, model=model: model.dense_matrix(new.X, new.codes, new.values,
                                                                               new.gp_bases))  # fmt: skip
        if prior is not None:
            result = _fit_streamed_selection(model, method, streamed, parts, tol, max_iter, seed, batch_size,
                                             learning_rate)  # fmt: skip
        elif method == "vb":
            result = fit_streamed_vb(problem, lambda func, *args: streamed.map(parts, func, *args), tol=tol,
                                     max_iter=max_iter)  # fmt: skip
        else:
            result = fit_linear_svi(problem, batch_size=batch_size, max_iter=max_iter, tol=tol,
                                    learning_rate=learning_rate, seed=seed,
                                    batches=lambda rng: PartitionBatches(streamed.loader(parts), streamed.counts, batch_size,
                                                                         rng))  # fmt: skip
        fit = BSVMFit(model=model, problem=problem, method=method, result=result, data_name=name, tol=tol)
    if not result.converged:
        warnings.warn(f"the fit stopped before converging ({result.stopping or 'max_iter'})",
                      ConvergenceWarning, stacklevel=3)  # fmt: skip
    return fit


def _fit_streamed_selection(model, method, streamed, parts, tol, max_iter, seed, batch_size, learning_rate):
    """A selection prior on out-of-core data: its VB with one pass over the partitions per sweep
    (:mod:`bayesvm.engines.selection.stream_vb`), or its SVI on minibatches drawn partition by partition."""
    from .engines.batches import PartitionBatches
    from .engines.selection.stream_vb import fit_streamed_selection_vb
    from .engines.selection.svi import fit_selection_svi

    if not model.penalized.any():
        raise BayesvmError("the selection prior has no slope to act on: every fixed-effect column is unpenalized")
    problem = model.selection_problem()
    if not isinstance(model.prior, LaplaceZero):  # slab / lasso scale: each column's SD over every row (as in memory)
        sd = model.design.column_moments()[1][problem.selected] / model.scale[problem.selected]
        problem = replace(problem, prior_scale=np.where(sd > 0, sd, 1.0))
    if method == "vb":
        result = fit_streamed_selection_vb(problem, lambda func, *args: streamed.map(parts, func, *args), tol=tol,
                                           max_iter=max_iter)  # fmt: skip
        if result.decreases:
            warnings.warn(f"the lower bound decreased at sweep(s) {result.decreases[:10]}", RuntimeWarning, 4)
        return result
    return fit_selection_svi(problem, batch_size=batch_size, max_iter=max_iter, tol=tol, learning_rate=learning_rate,
                             seed=seed, batches=lambda rng: PartitionBatches(streamed.loader(parts), streamed.counts,
                                                                             batch_size, rng))  # fmt: skip


def _streamed_refusal(model) -> str:
    """Why out-of-core VB cannot take this model: it streams the largest grouping factor by level and every other
    random-effect term as dense columns, and those exceed :data:`MAX_DENSE_COLUMNS`."""
    terms = model.design.re_terms
    sizes: dict[str, int] = {}
    for term in terms:
        sizes[term.group] = sizes.get(term.group, 0) + term.n_levels * term.k
    largest = max(sizes, key=sizes.get)
    others = ", ".join(f"{g!r} ({size:,})" for g, size in sizes.items() if g != largest)
    return (
        f"out-of-core VB streams the largest grouping factor {largest!r} level by level and the other random-effect "
        f"terms as dense columns: {others} coefficients, more than {MAX_DENSE_COLUMNS} in all. Crossed factors of "
        "this size need the sparse structure of in-memory data (method='vb', with probes= for very many levels)"
    )
