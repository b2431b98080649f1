"""Gibbs samplers for the selection priors (Luts & Ormerod 2014, Appendix B; Polson & Scott 2011, sections 4.1-4.2).

Every sampler alternates ``omega_i = 1/a_i | coefficients ~ InverseGaussian(1 / |1 - y_i f_i|, 1)`` with the prior's
own steps (:mod:`bayesvm.engines.selection.gibbs_steps`: Laplace-zero, spike-and-slab, lasso), all written in the
complete-data sufficient statistics ``G = X' diag(omega) X`` and ``r = X' Y (1 + omega)``, formed once per iteration
(one ``syrk``).

Random-effect terms (``problem.components``) are one more Gaussian block: their prior precision
``blockdiag(Sigma_c^{-1})`` is added to ``G`` (their columns are never scaled by an indicator), so each
step above conditions on it -- spike-and-slab's collapsed model moves integrate the random effects out
with the slopes -- and ``Sigma_c | u_c`` is drawn after the coefficients (:func:`bayesvm.engines.linear.gibbs.
draw_components`).  With ``imputation`` the chain runs in segments, a new completed data set from the
imputation model's own chain at the start of each (:mod:`bayesvm.engines.imputation.segments`, which the sampler
asks for the stored iterations, each new design and the pooled imputation draws).  After
the prior's step, two kinds of model moves run on the posterior with ``omega`` integrated out: the swaps of
:mod:`bayesvm.engines.selection.moves` and a sweep of exact ``(gamma_k, beta_k)`` updates
(:mod:`bayesvm.engines.selection.marginal_pairs`), which stop the indicators sticking to what ``omega``
remembers on many rows, and that module's exchanges between an included and an excluded slope with both
integrated out (near-substitutes such as spam's ``font`` and ``charHash``), and the line moves of
:mod:`bayesvm.engines.selection.directions` (hit-and-run along directions drawn from the coefficients' tuning
covariance, which move slopes that share their signal together), and the sheared pair updates of
:mod:`bayesvm.engines.selection.sheared_pairs` (each ``(gamma_k, c_k)`` redrawn exactly while the coefficients that
take over its signal when it leaves slide with it, by the shift learned from the tuning draws), and the model jumps of
:mod:`bayesvm.engines.selection.model_jumps` (independence proposals of the whole model from the VB fit, which take a
chain out of a far worse model that no one- or two-slope move can leave: every slope out, on Contraception); then the
collapsed variance step, the location shift and the exact level draws of each random-effect term
(:mod:`bayesvm.engines.linear.collapsed_variance`, as the linear sampler's default, which draws the levels first:
mostly one-row groups otherwise leave the variance stuck in one of its modes); then ``omega`` (and Laplace-zero's
``b``) is drawn afresh.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ...errors import BayesvmError
from ...linalg.dense import blas_threads, spd_inverse
from ...memory import check_memory
from ...model.problems import SelectionProblem, VBProblem
from ..components import draw_components
from ..gibbs_driver import GibbsResult, kept_draw_index, run_chains, run_until_converged
from ..joint import log_component_prior, log_pseudo_likelihood
from ..linear.collapsed_variance import CollapsedVariance
from ..linear.gibbs_rows import MARGIN_FLOOR, weighted_rows
from .directions import LineMoves
from .laws import law_of
from .marginal_pairs import MarginalPairs
from .model_jumps import JumpReference, ModelJumps, jump_reference
from .moves import SwapMoves
from .sheared_pairs import ShearedPairs
from .vb import LOG_2PI


@dataclass
class SelectionGibbsResult(GibbsResult):
    """Gibbs draws under a selection prior.

    ``theta_d`` holds the effective coefficients (exact zeros for excluded slopes); ``include``
    is ``(chains, draws, m)`` with the indicators ``gamma`` (all ones under the lasso); ``scale``
    is ``(chains, draws)``: ``sigma_u`` (Laplace-zero), ``nu`` (lasso) or the fixed slab ``nu``.
    ``include_probability`` (same shape as ``include``; None without the exact pair updates, as in the papers'
    samplers) holds ``P(gamma_k = 1 | the rest)`` at each kept iteration's update of slope ``k``: its average is
    the Rao-Blackwellised inclusion probability (:mod:`bayesvm.engines.selection.marginal_pairs`).
    """

    include: np.ndarray = None
    scale: np.ndarray = None
    selected: np.ndarray = None
    include_probability: np.ndarray | None = None

    @property
    def scale_estimate(self) -> tuple[str, float] | None:
        """The prior's scale averaged over the draws (the engine-output contract; fixed scales average to themselves)."""
        return None if self.scale is None else ("E[{s}]", float(np.mean(self.scale)))


TUNE = 2000
"""Default burn-in of this sampler (``bsvm``'s too: :func:`bayesvm.control.default_tune`).  Its sheared pair updates
(:mod:`bayesvm.engines.selection.sheared_pairs`) estimate each rarely included slope's shift from the tuning draws
in which it is in and out of the model, so a rarely included slope needs long tuning to have been seen in both
(``benchmarks/gibbs_mixing.py`` checks the inclusion probabilities' R-hat at this length)."""


def sample_selection(
    problem: SelectionProblem,
    draws: int = 1000,
    tune: int = TUNE,
    chains: int = 4,
    thin: int = 1,
    seed: int | None = None,
    cores: int = 1,
    progress: bool = True,
    swaps: bool = True,
    imputation: object = None,
    pairs: bool = True,
    exchanges: bool = True,
    lines: bool | None = None,
    monitor=None,
    shears: bool = True,
    collapsed: bool = True,
    jumps: bool = True,
) -> SelectionGibbsResult:
    """Run ``chains`` chains of the prior's sampler; in parallel processes when ``cores > 1``.

    ``draws="auto"`` samples until every quantity of ``monitor(coef, include, components)`` (default: the
    coefficients outside the random-effect terms, the inclusion probabilities' draws (each ``P(gamma_k = 1 | rest)``
    where the pair updates run, else the indicators) and the components' SDs) has R-hat
    <= 1.01 and bulk ESS >= 400, in batches, the chains side by side in this process
    (:func:`bayesvm.engines.gibbs_driver.run_until_converged`; not with ``imputation``).

    ``swaps=False`` leaves out the swap moves of :mod:`bayesvm.engines.selection.moves`, ``pairs=False`` the
    updates of :mod:`bayesvm.engines.selection.marginal_pairs`, ``exchanges=False`` its exchanges and ``lines=False``
    the line moves of :mod:`bayesvm.engines.selection.directions` (``None``: with Laplace-zero, whose coefficients
    persist between iterations; spike-and-slab redraws them from their collapsed conditional every iteration, where
    the lines add cost and no mixing), ``shears=False`` the
    sheared pair updates of :mod:`bayesvm.engines.selection.sheared_pairs`, ``jumps=False`` the model jumps of
    :mod:`bayesvm.engines.selection.model_jumps` (their VB fit runs once here, before the chains; not with
    ``imputation`` or more than ``model_jumps.JUMP_MAX_SLOPES`` slopes) and ``collapsed=False`` the random-effect terms' moves of :mod:`bayesvm.engines.linear.collapsed_variance` (all off: the
    papers' samplers, kept for the comparison in ``benchmarks/gibbs_mixing.py``; the exchanges run only with the
    pairs, since on their own they never change the number of slopes included).  ``imputation`` (an
    :class:`bayesvm.engines.imputation.segments.ImputedSegments` on the same rows and columns as ``problem.X``) draws
    a new completed data set every few iterations from the imputation model's own chain, as
    :mod:`bayesvm.engines.imputation.joint_model` does for the linear sampler (the cut posterior of
    :mod:`bayesvm.engines.imputation.multiple`)."""
    start = time.perf_counter()
    stopping = None
    if draws == "auto":
        if imputation is not None:
            raise BayesvmError("draws='auto' does not run with imputation: its segments need a number of draws")
        moves = {
            "swaps": swaps,
            "pairs": pairs,
            "exchanges": exchanges,
            "lines": lines,
            "shears": shears,
            "collapsed": collapsed,
            "jumps": jump_reference(problem) if jumps else None,
        }
        runs, stopping = sample_selection_until_converged(problem, tune, thin, chains, seed, progress, monitor, moves)
        draws = runs[0]["lp"].size
    else:
        check_memory(
            8.0 * chains * draws * (problem.q + 2 * problem.m + 2),  # + each slope's P(gamma_k = 1 | rest)
            f"storing {chains} x {draws} draws of {problem.q + problem.m} parameters",
            "use fewer draws or thin=k",
        )
        chain = partial(
            _run_chain,
            swaps=swaps,
            pairs=pairs,
            exchanges=exchanges,
            lines=lines,
            shears=shears,
            imputation=imputation,
            collapsed=collapsed,
            jumps=jump_reference(problem) if jumps and imputation is None else None,
        )
        runs = run_chains(chain, problem, draws, tune, thin, chains, seed, cores, progress)
    extra = {} if imputation is None else imputation.pooled(runs)
    result_type = SelectionGibbsResult if imputation is None else imputation.result_type
    return result_type(
        theta_d=np.stack([r["coef"] for r in runs]),
        theta_b=np.zeros((chains, draws, 0, 0)),
        components=[np.stack([r["components"][c] for r in runs]) for c in range(len(problem.components))],
        log_posterior=np.stack([r["lp"] for r in runs]),
        elapsed=time.perf_counter() - start,
        tune=tune,
        thin=thin,
        seed=seed,
        include=np.stack([r["include"] for r in runs]),
        include_probability=(
            None if runs[0]["include_probability"] is None else np.stack([r["include_probability"] for r in runs])
        ),
        scale=np.stack([r["scale"] for r in runs]),
        selected=problem.selected,
        stopping=stopping,
        **extra,
    )


def _default_monitor(problem: SelectionProblem):
    """What ``draws="auto"`` watches by default: the coefficients outside every random-effect term, the inclusion
    indicators and the SDs of every component."""
    in_component = np.zeros(problem.q, dtype=bool)
    for comp in problem.components:
        in_component[comp.index.ravel()] = True
    keep = np.flatnonzero(~in_component)

    def monitor(coef: np.ndarray, include: np.ndarray, components: list[np.ndarray]) -> np.ndarray:
        parts = [coef[..., keep], include.astype(float)]
        parts += [np.sqrt(np.diagonal(c, axis1=-2, axis2=-1)) for c in components]
        return np.concatenate(parts, axis=-1)

    return monitor


def sample_selection_until_converged(
    problem: SelectionProblem, tune: int, thin: int, chains: int, seed, progress: bool, monitor=None, moves=None
) -> tuple[list[dict], str]:
    """``draws="auto"``: :func:`bayesvm.engines.gibbs_driver.run_until_converged` on this sampler's chains
    (:func:`chain_records`, with the ``moves`` switches of :func:`sample_selection`), watching
    ``monitor(coef, include, components)``; returns the chains' dicts and the stopping reason."""
    monitor = monitor or _default_monitor(problem)
    seeds = np.random.SeedSequence(seed).spawn(chains)
    streams = [chain_records(problem, tune, thin, s, **(moves or {})) for s in seeds]

    def watched(records: list[list]) -> np.ndarray:
        runs = [_stack_records(kept, problem) for kept in records]
        inclusion = "include" if runs[0]["include_probability"] is None else "include_probability"
        return monitor(
            np.stack([r["coef"] for r in runs]),
            np.stack([r[inclusion] for r in runs]),
            [np.stack([r["components"][c] for r in runs]) for c in range(len(problem.components))],
        )

    with blas_threads(problem.q):
        records, reason = run_until_converged(streams, watched, progress)
    return [_stack_records(kept, problem) for kept in records], reason


def _stack_records(records: list[tuple], problem: SelectionProblem) -> dict:
    """Kept draws of :func:`chain_records` (without imputation) as a chain's arrays."""
    return {
        "coef": np.stack([r[0] for r in records]),
        "include": np.stack([r[1] for r in records]).astype(np.int8),
        "include_probability": None if records[0][5] is None else np.stack([r[5] for r in records]),
        "scale": np.array([r[2] for r in records], dtype=float),
        "lp": np.array([r[3] for r in records], dtype=float),
        "components": [np.stack([r[4][c] for r in records]) for c in range(len(problem.components))],
    }


def _run_chain(
    problem, draws, tune, thin, seed, show, swaps: bool = True, pairs: bool = True, exchanges: bool = True,
    lines: bool | None = None,
    imputation=None,
    shears: bool = True,
    collapsed: bool = True,
    jumps: JumpReference | None = None,
) -> dict:  # fmt: skip
    with blas_threads(problem.q):
        return _chain(
            problem, draws, tune, thin, seed, show, swaps, imputation, pairs, exchanges, lines, shears, collapsed, jumps
        )


def _chain(
    problem: SelectionProblem,
    draws: int,
    tune: int,
    thin: int,
    seed,
    show: bool,
    swaps: bool,
    imputation: object = None,
    pairs: bool = True,
    exchanges: bool = True,
    lines: bool | None = None,
    shears: bool = True,
    collapsed: bool = True,
    jumps: JumpReference | None = None,
) -> dict:
    """One chain of ``draws`` kept draws: :func:`chain_records` stored in arrays."""
    q, m = problem.q, problem.m
    out = {
        "coef": np.empty((draws, q)),
        "include": np.empty((draws, m), dtype=np.int8),
        "scale": np.empty(draws),
        "lp": np.empty(draws),
        "components": [np.empty((draws, c.k, c.k)) for c in problem.components],
    }
    if imputation is not None:
        out.update(imputation.chain_arrays(draws))
    records = chain_records(
        problem,
        tune,
        thin,
        seed,
        swaps,
        pairs,
        exchanges,
        lines,
        imputation,
        draws,
        show,
        shears=shears,
        collapsed=collapsed,
        jumps=jumps,
    )
    probabilities = []
    for i, record in enumerate(records):
        out["coef"][i], out["include"][i], out["scale"][i], out["lp"][i] = record[:4]
        for c, cov in enumerate(record[4]):
            out["components"][c][i] = cov
        probabilities.append(record[5])
        if imputation is not None:
            imputation.keep(out, i, record[6])
    out["include_probability"] = None if not probabilities or probabilities[0] is None else np.stack(probabilities)
    return out


def chain_records(
    problem: SelectionProblem,
    tune: int,
    thin: int,
    seed,
    swaps: bool = True,
    pairs: bool = True,
    exchanges: bool = True,
    lines: bool | None = None,
    imputation: object = None,
    draws: int | None = None,
    show: bool = False,
    shears: bool = True,
    collapsed: bool = True,
    jumps: JumpReference | None = None,
):
    """One chain of the prior's sampler (module docstring), as a generator of its kept draws
    ``(coef, gamma, scale, log posterior, covs, conditional[, (mu, sigma, z)])``, ``conditional`` being each
    ``P(gamma_k = 1 | the rest)`` of the last sweep of pair updates (None without them): ``draws`` of them, or for
    as long as it is asked when ``draws`` is None (``draws="auto"``, :func:`sample_selection_until_converged`; not with
    ``imputation``, whose segments are laid out for a known number of draws)."""
    rng = np.random.default_rng(seed)
    y, X = problem.y, problem.X
    # class weights: the Gaussian step on rows scaled by omega_i with margins omega_i (gibbs_rows); the moves below
    # evaluate each row's hinge times omega_i; the random intercepts' collapsed moves assume unit weights (off)
    weights = problem.weights
    if weights is not None:
        collapsed = False
    state = law_of(problem.prior).gibbs_step(problem, rng)
    moves = _selection_moves(problem, tune, swaps, pairs, lines, shears, jumps)
    omega = np.exp(rng.normal(0.0, 0.5, y.size))  # over-dispersed start
    components = problem.components
    intercepts = _collapsed_moves(problem, tune, imputation) if collapsed and components else None
    covs = [np.eye(c.k) for c in components]  # random-effect terms: Sigma_c, drawn after the coefficients
    aux: list = [None] * len(components)
    if draws is None:  # draws="auto": every thin-th iteration after tuning, without end
        if imputation is not None:
            raise BayesvmError("draws='auto' does not run with imputation: its segments need a number of draws")
        stored, steps = None, itertools.count()
    else:
        stored = kept_draw_index(tune, draws, thin) if imputation is None else imputation.storage(tune, draws, thin)
        steps = range(stored.size)
    completed = None if imputation is None else imputation.start(y, stored.size, thin, rng)  # (imputation segments)
    if show:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="Gibbs", leave=False)
    for step in steps:
        new_design = None if completed is None else completed.design_at(step)
        if new_design is not None:  # the first iteration of a segment: a new completed data set
            problem = replace(problem, X=new_design)
            X = problem.X
            moves.set_design(X)
        precision_weights, linear_terms = weighted_rows(y, omega, weights)
        gram = problem.weighted_gram(precision_weights)
        # the random-effect blocks' prior precision joins G: their columns are never scaled by gamma, so every
        # step below reads G + blockdiag(Sigma^{-1}) as the complete-data precision of the unpenalised part
        problem.add_component_precisions(gram, [spd_inverse(cov) for cov in covs])
        r = X.T @ linear_terms
        coef = moves.run(state, state.update(gram, r), rng, gram, step, exchanges)
        if intercepts is not None:  # (sigma^2, u), the shift and u with omega integrated out; omega drawn afresh below
            coef, _, covs, f = intercepts(coef, _NO_BLOCKS, covs, aux, X @ coef, rng, step)
            intercepts.level_draws(coef, _NO_BLOCKS, covs, f, rng)
        if components:  # Sigma_c | u_c (IG, half-t through its auxiliary variable, or IW)
            covs = draw_components(components, [coef[c.index] for c in components], rng, aux)
        f = X @ coef
        margin = 1.0 - y * f if weights is None else weights * (1.0 - y * f)
        omega = rng.wald(1.0 / np.maximum(np.abs(margin), MARGIN_FLOOR), 1.0)
        if stored is not None:
            keep = stored[step] >= 0
        else:
            keep = step >= tune and (step - tune) % thin == 0
        if keep:
            log_posterior = (
                log_pseudo_likelihood(y, f, weights)
                + _log_fixed_prior(problem, coef)
                + state.log_prior(coef)
                + log_component_prior(components, coef, np.zeros((0, 0)), covs)
            )
            conditional = None if moves.pairs is None else moves.pairs.conditional.copy()  # Rao-Blackwellised inclusion
            record = (
                np.array(coef, copy=True),
                state.gamma.copy(),
                state.scale,
                log_posterior,
                list(covs),
                conditional,
            )
            yield record if completed is None else (*record, completed.record())


_NO_BLOCKS = np.zeros((0, 0))


@dataclass
class SelectionMoves:
    """The model-space moves of a selection chain, each None where it does not apply: indicator swaps, marginal
    pairs (and exchanges), line moves of the unpenalised coefficients, sheared pairs and model jumps
    (:mod:`bayesvm.engines.selection.moves` and its siblings)."""

    swaps: SwapMoves | None
    pairs: MarginalPairs | None
    lines: LineMoves | None
    sheared: ShearedPairs | None
    jumps: ModelJumps | None
    selected: np.ndarray  # the penalised columns (the pairs' and sheared pairs' curvature: the Gram's diagonal there)

    def set_design(self, X: np.ndarray) -> None:
        """The design the moves evaluate the hinge on (a new completed data set of multiple imputation)."""
        for move in (self.swaps, self.pairs, self.lines, self.sheared, self.jumps):
            if move is not None:
                move.X = X

    def run(self, state, coef: np.ndarray, rng, gram: np.ndarray, step: int, exchanges: bool) -> np.ndarray:
        """Each move in turn from ``coef`` (``theta | w`` of this iteration), on the posterior with ``omega`` (and the
        random effects) integrated out; both are drawn afresh after them."""
        diagonal = np.diag(gram)
        if self.swaps is not None:
            coef = self.swaps.run(state, coef, rng)
        if self.pairs is not None:
            coef = self.pairs.run(state, coef, rng, diagonal[self.selected])
            if exchanges:
                coef = self.pairs.exchange(state, coef, rng)
            self.pairs.observe(step, state.gamma)
        if self.lines is not None:
            coef = self.lines.run(state, coef, rng, gram)
            self.lines.observe(step, coef)
        if self.sheared is not None:
            coef = self.sheared.run(state, coef, rng, iteration=step)
            self.sheared.observe(step, coef, state.gamma, diagonal[self.selected])
        if self.jumps is not None:
            coef = self.jumps.run(state, coef, rng)
        if any(move is not None for move in (self.swaps, self.pairs, self.lines, self.sheared, self.jumps)):
            state.after_moves()
        return coef


def _selection_moves(problem: SelectionProblem, tune: int, swaps: bool, pairs: bool, lines: bool | None,
                     shears: bool, jumps: JumpReference | None) -> SelectionMoves:  # fmt: skip
    """The moves :func:`chain_records` makes: with indicators (spike-and-slab, or Laplace-zero with ``rho < 1``)
    swaps (several penalised slopes), marginal pairs, line moves (Laplace-zero by default), sheared pairs and, with a
    reference, model jumps; none without indicators."""
    y, X, weights, selected = problem.y, problem.X, problem.weights, problem.selected
    law = law_of(problem.prior)
    indicators = law.indicators
    free = problem.unselected
    free_precision = problem.fixed_precision[free]
    lined = lines or (lines is None and law.lines_by_default)
    return SelectionMoves(
        swaps=SwapMoves(y, X, selected, weights=weights) if swaps and indicators and problem.m > 1 else None,
        pairs=MarginalPairs(y, X, selected, tune, weights) if pairs and indicators else None,
        lines=LineMoves(y, X, free, free_precision, selected, tune, weights=weights) if indicators and lined else None,
        sheared=ShearedPairs(y, X, free, free_precision, selected, tune, weights) if shears and indicators else None,
        jumps=ModelJumps(y, X, selected, free_precision, jumps, weights) if jumps is not None and indicators else None,
        selected=selected,
    )


def _collapsed_moves(problem: SelectionProblem, tune: int, imputation: object) -> CollapsedVariance | None:
    """The random intercepts' moves of :mod:`bayesvm.engines.linear.collapsed_variance` on the selection design.

    Only the unpenalised columns have a fixed normal prior there (``fixed_precision`` is unused at the penalised
    ones), so only they can be a term's location column; an imputed column changes with each completed data set and
    is never one.  None when no term is eligible."""
    precision = np.zeros(problem.q)
    free = problem.unselected
    precision[free] = problem.fixed_precision[free]
    view = VBProblem(y=problem.y, D=problem.X, fixed_precision=precision, components=problem.components)
    moves = CollapsedVariance(view, tune, None if imputation is None else imputation.columns)
    return moves if moves.has_moves else None


def _log_fixed_prior(problem: SelectionProblem, coef: np.ndarray) -> float:
    free = problem.unselected
    lam = problem.fixed_precision[free]
    return 0.5 * float(np.sum(np.log(lam) - LOG_2PI - lam * coef[free] ** 2))
