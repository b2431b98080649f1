"""Gibbs sampler for the linear Bayesian SVM (Luts & Ormerod 2014, Appendix A; Polson & Scott 2011, section 4).

Full conditionals, with ``omega_i = 1 / a_i`` and ``C = [D, Z_b]``:

* ``theta | omega, components ~ N(P^{-1} C' Y (1 + omega), P^{-1})``,
  ``P = C' diag(omega) C + blockdiag(prior precisions)``: one block draw through the same
  structured elimination the VB engine uses (``linalg.gaussian_draw``; the sparse Cholesky
  on the sparse path);
* ``omega_i | theta ~ InverseGaussian(1 / |1 - y_i c_i' theta|, 1)`` (``a_i ~ GIG(1/2, 1, (1 - y_i f_i)^2)``),
  drawn with ``Generator.wald``;
* ``sigma^2 | u ~ IG(A + m/2, B + ||u||^2 / 2)`` for each single-column component;
* ``Sigma | u ~ IW(nu + J, Psi + sum_j u_j u_j')`` for each correlated term.

Class weights ``omega_i`` (:mod:`bayesvm.model.class_weights`): row ``i``'s factor
``exp(-2 omega_i max(0, 1 - y_i f_i))`` is the augmented row of the design row ``omega_i c_i`` with margin
``m_i = omega_i`` instead of 1, so the chain runs on the scaled design (:func:`scaled_by_weights`) with
``w_i | theta ~ InverseGaussian(1 / |m_i - y_i c~_i' theta|, 1)`` and linear term ``C~' Y (1 + m w)``; the
paper's sampler, without the interweaving moves and the compiled passes, which assume margin 1.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ...linalg import compiled
from ...linalg.dense import (
    SPLIT_ROWS,
    BlockedFactor,
    LevelSums,
    RowStatistics,
    blas_threads,
    chunked_gram_and_product,
    gaussian_draw,
    row_statistics,
    spd_inverse,
    splits_rows,
)
from ...linalg.row_threads import row_pool
from ...linalg.schur import schur_sparse_draw
from ...linalg.sparse import SparseCholesky
from ...memory import check_memory
from ...model.output import EngineOutput
from ...model.problems import VBProblem, sorted_by_level
from .. import variance_prior
from ..joint import LogPrior, component_values
from ..overrelax import RELAXATION
from ..workers import run_in_processes
from . import compiled_rows, fused_iteration
from .collapsed_variance import CollapsedVariance
from .fused_iteration import BATCH, FusedIteration
from .interweave import ScaleMoves
from .vb import prior_precisions, sparse_prior

#: Smallest |1 - y f| used for the inverse-Gaussian mean (a draw exactly on the margin has probability 0).
MARGIN_FLOOR = 1e-12


def inverse_gaussian(mean: np.ndarray, normals: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """``InverseGaussian(mean, 1)`` draws from standard normals and uniforms (Michael, Schucany & Haas 1976).

    With ``Y = mean nu^2``, the smaller root of the MSH quadratic is written without cancellation,
    ``X = 4 mean Y / (Y + sqrt(Y (Y + 4)))^2`` (the textbook ``mean + mean/2 (Y - sqrt(4Y + Y^2))`` loses every
    digit once ``mean`` is large, as it is near the margin); ``X`` is kept with probability
    ``mean / (mean + X)``, else ``mean^2 / X``.  Consumes ``normals`` and ``uniforms`` as buffers.  The compiled
    row pass (:func:`compiled_rows.inverse_gaussian_scalar`) does the same operations in the same order.
    """
    y = np.square(normals, out=normals)
    y *= mean
    t = y + 4.0
    t *= y
    np.sqrt(t, out=t)
    t += y
    np.square(t, out=t)
    x = y
    x *= 4.0
    x *= mean
    x /= t
    t = np.add(mean, x, out=t)
    t *= uniforms
    flipped = np.divide(mean, x, out=uniforms)
    flipped *= mean
    np.copyto(x, flipped, where=t > mean)
    return x


def level_boundary_split(blocked: BlockedFactor | None, n: int) -> int:
    """Where to split ``n`` rows in two halves: ``n // 2``, moved to the nearer boundary between levels when
    the blocked factor's codes are sorted, so that each half's per-level sums cover levels of its own."""
    half = n // 2
    if blocked is None or n < 2:
        return half
    codes = blocked.codes
    if np.any(codes[1:] < codes[:-1]):
        return half
    start = int(np.searchsorted(codes, codes[half], side="left"))
    stop = int(np.searchsorted(codes, codes[half], side="right"))
    return start if half - start <= stop - half else stop


class LatentDraws:
    """``omega_i ~ InverseGaussian(1 / margin_i, 1)`` for every row (Appendix A).

    On many rows (:data:`linalg.SPLIT_ROWS`) the rows are split in two fixed halves at ``split`` (default
    ``n // 2``), each with its own generator spawned from the chain's.  A half draws its standard normals and
    uniforms in bulk and transforms them (:func:`inverse_gaussian`), in its own thread (numpy releases the
    GIL in both), and the compiled row pass takes the same numbers.  :class:`DenseRows` draws the next numbers
    (:meth:`prefetch`) while the caller draws ``theta``, so the two overlap.  The split does not depend on the
    machine, so a seed gives the same chain everywhere.
    """

    def __init__(self, rng: np.random.Generator, n: int, split: int | None = None):
        self.rng, self.n = rng, n
        self.split = n >= SPLIT_ROWS
        self._pending = None
        if self.split:
            at = n // 2 if split is None else split
            self.halves = [slice(0, at), slice(at, n)]
            children = np.random.SeedSequence(rng.integers(2**63, size=4)).spawn(2)
            self.generators = [np.random.default_rng(child) for child in children]

    def random_numbers(self, half: int) -> tuple[np.ndarray, np.ndarray]:
        """The standard normals and uniforms of ``half``'s next draw."""
        rows = self.halves[half]
        size = len(range(*rows.indices(rows.stop)))
        generator = self.generators[half]
        return generator.standard_normal(size), generator.random(size)

    def prefetch(self) -> None:
        """Start drawing both halves' next random numbers in the row threads: they do not depend on ``theta``, so
        they overlap the caller's ``theta`` draw (the same numbers in the same order as drawn on demand)."""
        self._pending = [row_pool().submit(self.random_numbers, h) for h in range(2)]

    def next_numbers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Both halves' next random numbers: the prefetched ones (waited for here, in the caller), or drawn now."""
        pending, self._pending = self._pending, None
        if pending is None:
            return list(row_pool().map(self.random_numbers, range(2)))
        return [future.result() for future in pending]

    def draw_half(self, half: int, margin: np.ndarray, numbers: tuple | None = None) -> np.ndarray:
        """The draws of ``half`` given its rows' margins (and its random numbers, if already drawn)."""
        return inverse_gaussian(1.0 / margin, *(numbers or self.random_numbers(half)))

    def whole_numbers(self) -> tuple[np.ndarray, np.ndarray]:
        """The standard normals and uniforms of an unsplit draw of every row (the numpy and the compiled row pass
        take the same numbers, so a seed gives the same chain with and without numba)."""
        n = self.n
        return self.rng.standard_normal(n), self.rng.random(n)

    def __call__(self, margin: np.ndarray) -> np.ndarray:
        if not self.split:
            return inverse_gaussian(1.0 / margin, *self.whole_numbers())
        out = np.empty(margin.size)

        def draw(half: int) -> None:
            rows = self.halves[half]
            out[rows] = self.draw_half(half, margin[rows])

        list(row_pool().map(draw, range(2)))
        return out


class DenseRows:
    """The row-wise half of a dense-path iteration: ``f = C theta``, ``omega | theta``, the log pseudo-likelihood
    ``-2 sum (1 - y f)_+`` and the row sums of the next ``theta`` draw (:class:`linalg.RowStatistics`).

    Where the rows split (:func:`linalg.splits_rows`) all of it runs in the two fixed halves of
    :class:`LatentDraws`, one thread each, in one hand-off per iteration, with the draws of
    :class:`LatentDraws`.  There it runs compiled (:func:`compiled_rows.row_pass`, per-level sums included)
    when numba is installed and each half's levels are its own (rows sorted by level, split at a level
    boundary: :func:`level_boundary_split`); otherwise with numpy, the per-level sums (sparse products, which
    hold the GIL) staying in the caller.  ``compiled=None`` chooses; ``True``/``False`` force it (tests).
    """

    def __init__(
        self,
        D: np.ndarray,
        y: np.ndarray,
        blocked: BlockedFactor | None,
        latent: LatentDraws,
        compiled: bool | None = None,
        margins: np.ndarray | None = None,
    ):
        self.D, self.y, self.blocked, self.latent = D, y, blocked, latent
        self.margins = margins  # each row's margin m_i (class weights on a scaled design), None: 1 (module docstring)
        if margins is not None:
            compiled = False  # (the compiled row pass has margin 1)
        n = y.size
        self.fused = latent.split and splits_rows(n, D.shape[1])
        if self.fused:
            can_compile = self._levels_split() and compiled_rows.available()
        else:  # one pass over every row; a row outside every level (code -1) stays with numpy
            can_compile = compiled_rows.available() and (blocked is None or bool(np.all(blocked.codes >= 0)))
        self.compiled = can_compile
        if compiled is not None:
            if compiled and not can_compile:
                raise ValueError("the compiled row pass needs numba (and, on split rows, sorted levels)")
            self.compiled = compiled
        self.f, self.omega = np.empty(n), np.empty(n)
        if self.compiled:
            self._compiled_buffers()
        elif self.fused and blocked is not None:
            K = blocked.K
            self.wz, self.wzz, self.zr = np.empty((n, K)), np.empty((n, K * K)), np.empty((n, K))

    def _levels_split(self) -> bool:
        """Whether the halves' level ranges are disjoint (always true without a blocked factor)."""
        if self.blocked is None:
            return True
        self.level_ranges = []
        for rows in self.latent.halves:
            codes = self.blocked.codes[rows]
            self.level_ranges.append((int(codes.min()), int(codes.max()) + 1) if codes.size else (0, 0))
        (_, stop), (start, _) = self.level_ranges
        return bool(np.all(self.blocked.codes >= 0)) and stop <= start

    def _compiled_buffers(self) -> None:
        q = self.D.shape[1]
        self.D = np.ascontiguousarray(self.D)
        # each row's nonzero columns where the dense part is wide and mostly zero (whole passes only)
        self.no_rows = np.zeros(0, dtype=np.int64)
        self.row_ptr, self.row_cols = compiled_rows.sparse_rows(self.D) if not self.fused else (self.no_rows,) * 2
        self.parts = [(np.zeros((q, q)), np.zeros(q)) for _ in range(2)]
        if self.blocked is None:
            self.codes, self.values = np.zeros(0, dtype=np.int64), np.zeros((self.y.size, 0))
            self.levels = LevelSums(np.zeros((0, 0, 0)), np.zeros((0, 0, q)), np.zeros((0, 0)))
            self.level_ranges = [(0, 0), (0, 0)]
        else:
            J, K = self.blocked.n_levels, self.blocked.K
            self.codes, self.values = self.blocked.codes, np.ascontiguousarray(self.blocked.values)
            # levels without rows stay zero; each half zeroes and fills its own range
            self.levels = LevelSums(np.zeros((J, K, K)), np.zeros((J, K, q)), np.zeros((J, K)))

    def predictor(self, theta_d: np.ndarray, theta_b: np.ndarray, rows: slice = slice(None)) -> np.ndarray:
        """``f`` on ``rows`` (no ``(n, K)`` temporaries); every row in one compiled loop where the row pass over
        every row is compiled."""
        if self.compiled and not self.fused and rows == slice(None):
            f = np.empty(self.y.size)
            compiled_rows.predictor(self.D, self.row_ptr, self.row_cols, self.codes, self.values, theta_d, theta_b, f)
            return f
        f = self.D[rows] @ theta_d
        if self.blocked is not None:
            codes, values = self.blocked.codes[rows], self.blocked.values[rows]
            for k in range(self.blocked.K):
                f += values[:, k] * theta_b[codes, k]
        return f

    def __call__(self, theta_d: np.ndarray, theta_b: np.ndarray) -> tuple[float, np.ndarray, RowStatistics]:
        """``(log pseudo-likelihood at theta, omega, row sums)``; the arrays are buffers reused by the next call."""
        if not self.fused and self.compiled:
            return self._compiled_whole(theta_d, theta_b)
        if not self.fused:
            f = self.predictor(theta_d, theta_b)
            margin = row_margins(self.margins, self.y, f)
            omega = self.latent(np.maximum(np.abs(margin), MARGIN_FLOOR))
            stats = row_statistics(self.D, omega, linear_terms(self.y, omega, self.margins), self.blocked)
            return -2.0 * float(np.sum(np.maximum(margin, 0.0))), omega, stats
        half = self._compiled_half if self.compiled else self._half
        numbers = self.latent.next_numbers()
        parts = list(row_pool().map(lambda h: half(h, theta_d, theta_b, numbers[h]), range(2)))
        self.latent.prefetch()  # the next call's random numbers, drawn while the caller draws theta
        gram = parts[0][0] + parts[1][0]
        stats = RowStatistics(0.5 * (gram + gram.T), parts[0][1] + parts[1][1])
        if self.compiled:
            stats = RowStatistics(stats.gram, stats.product, levels=self.levels)
        elif self.blocked is not None:
            stats = RowStatistics(stats.gram, stats.product, self.wz, self.wzz, self.zr)
        return -2.0 * (parts[0][2] + parts[1][2]), self.omega, stats

    def _half(self, h: int, theta_d: np.ndarray, theta_b: np.ndarray, numbers: tuple) -> tuple:
        rows = self.latent.halves[h]
        f = self.f[rows] = self.predictor(theta_d, theta_b, rows)
        y = self.y[rows]
        margins = None if self.margins is None else self.margins[rows]
        margin = row_margins(margins, y, f)
        hinge = float(np.sum(np.maximum(margin, 0.0)))
        omega = self.omega[rows] = self.latent.draw_half(h, np.maximum(np.abs(margin), MARGIN_FLOOR), numbers)
        r = linear_terms(y, omega, margins)
        if self.blocked is not None:  # as linalg.row_statistics, written straight into the buffers (no temporaries
            # of every row to copy in)
            z = self.blocked.values[rows]
            wz = self.wz[rows] = z * omega[:, None]
            self.wzz[rows] = (wz[:, :, None] * z[:, None, :]).reshape(z.shape[0], -1)
            self.zr[rows] = z * r[:, None]
        return (*chunked_gram_and_product(self.D[rows], omega, r), hinge)

    def _compiled_whole(self, theta_d: np.ndarray, theta_b: np.ndarray) -> tuple[float, np.ndarray, RowStatistics]:
        """:meth:`__call__` on rows that do not split: one compiled pass over every row (the numbers of
        :meth:`LatentDraws.whole_numbers`, as the numpy path draws them)."""
        normals, uniforms = self.latent.whole_numbers()
        gram, product = self.parts[0]
        levels = self.levels
        hinge = compiled_rows.row_pass(
            self.D, self.row_ptr, self.row_cols, self.y, self.codes, self.values, theta_d, theta_b, normals, uniforms,
            MARGIN_FLOOR, 0,
            self.omega, gram, product, levels.blocks, levels.cross, levels.rhs,
        )  # fmt: skip
        stats = RowStatistics(0.5 * (gram + gram.T), product, levels=levels if self.blocked is not None else None)
        return -2.0 * float(hinge), self.omega, stats

    def _compiled_half(self, h: int, theta_d: np.ndarray, theta_b: np.ndarray, numbers: tuple) -> tuple:
        rows = self.latent.halves[h]
        normals, uniforms = numbers
        start, stop = self.level_ranges[h]
        gram, product = self.parts[h]
        codes = self.codes[rows] if self.codes.size else self.codes
        levels = self.levels
        hinge = compiled_rows.row_pass(
            self.D[rows],
            self.no_rows,
            self.no_rows,
            self.y[rows],
            codes,
            self.values[rows],
            theta_d,
            theta_b,
            normals,
            uniforms,
            MARGIN_FLOOR,
            start,
            self.omega[rows],
            gram,
            product,
            levels.blocks[start:stop],
            levels.cross[start:stop],
            levels.rhs[start:stop],
        )
        return gram, product, float(hinge)


@dataclass
class GibbsResult(EngineOutput):
    """Stored draws (after tuning and thinning).

    Attributes
    ----------
    theta_d
        ``(chains, draws, q)``.
    theta_b
        ``(chains, draws, J, K)`` (``J = K = 0`` without a blocked factor).
    components
        One ``(chains, draws, k, k)`` array per variance component (variance or covariance matrix).
    log_posterior
        ``(chains, draws)``: log pseudo-posterior ``-2 sum_i (1 - y_i f_i)_+ + log prior`` with every
        constant of the prior.
    """

    #: The output's form (the engine-output contract :mod:`bayesvm.results` reads): draws (chains x draws).
    posterior_form: ClassVar[str] = "sampled"

    theta_d: np.ndarray
    theta_b: np.ndarray
    components: list[np.ndarray]
    log_posterior: np.ndarray
    elapsed: float
    tune: int
    thin: int
    seed: int | None
    stopping: str | None = None  # draws="auto": why sampling stopped

    @property
    def chains(self) -> int:
        return self.theta_d.shape[0]

    @property
    def draws(self) -> int:
        return self.theta_d.shape[1]


def draw_components(
    components,
    values: list[np.ndarray],
    rng: np.random.Generator,
    aux: list,
    current: list[np.ndarray] | None = None,
    relaxation: float = 0.0,
) -> list[np.ndarray]:
    """One Gibbs draw of every variance component given its coefficients ``values[c]`` (``J x k``): IW, IG, or
    the half-t through its auxiliary variable, kept in ``aux[c]`` between draws (updated in place;
    :mod:`bayesvm.engines.variance_prior`).  With ``relaxation > 0`` and the ``current`` components, the variance of
    each random-effect term (not an inverse-Wishart matrix, not the learned penalty) takes the over-relaxed step of
    its inverse gamma instead (:mod:`bayesvm.engines.overrelax`)."""
    from scipy import stats

    out = []
    for c, (comp, u) in enumerate(zip(components, values)):
        if comp.is_wishart:
            scale = comp.prior_scale + u.T @ u
            out.append(
                np.atleast_2d(stats.invwishart(df=comp.prior_df + comp.n_levels, scale=scale).rvs(random_state=rng))
            )
            continue
        now = None if current is None or comp.source < 0 else float(current[c][0, 0])
        variance, aux[c] = variance_prior.draw(comp, float(np.sum(u**2)), rng, aux[c], now, relaxation)
        out.append(np.array([[variance]]))
    return out


def _run_chain(
    problem: VBProblem,
    draws: int,
    tune: int,
    thin: int,
    seed: np.random.SeedSequence,
    show: bool,
    interweave: bool = True,
    whole: bool = True,
) -> dict:
    with blas_threads(problem.D.shape[1], problem.n):
        return _chain(problem, draws, tune, thin, seed, show, interweave, whole)


def _chain(
    problem: VBProblem,
    draws: int,
    tune: int,
    thin: int,
    seed: np.random.SeedSequence,
    show: bool,
    interweave: bool = True,
    whole: bool = True,
) -> dict:
    """``draws`` kept draws of one chain (:func:`chain_draws`), stacked; ``whole``: with the compiled whole iterations
    where the problem has their structure (:mod:`.fused_iteration`; else the separately compiled steps: the same
    chain to rounding)."""
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=tune + draws * thin, desc="Gibbs", leave=False)
    stream = chain_draws(problem, tune, thin, seed, interweave, tick=None if bar is None else bar.update, whole=whole)
    records = [next(stream) for _ in range(draws)]
    stream.close()
    if bar is not None:
        bar.close()
    return stack_draws(records, problem)


def stack_draws(records: list[tuple], problem: VBProblem) -> dict:
    """Kept draws ``(theta_d, theta_b, covs, log pseudo-likelihood)`` of one chain (:func:`chain_draws`) as arrays
    (a chain's dict), with each draw's log posterior: the log pseudo-likelihood plus the log prior, the latter
    computed here for every draw at once (:meth:`bayesvm.engines.joint.LogPrior.of_draws`)."""
    out = {
        "theta_d": np.stack([r[0] for r in records]),
        "theta_b": np.stack([r[1] for r in records]),
        "components": [np.stack([r[2][c] for r in records]) for c in range(len(problem.components))],
    }
    prior = LogPrior(problem).of_draws(out["theta_d"], out["theta_b"], out["components"])
    out["log_posterior"] = np.array([r[3] for r in records]) + prior
    return out


def scaled_by_weights(problem: VBProblem) -> VBProblem:
    """The problem with each row of the design (dense part and blocked values) times its class weight, and no
    weights: with margins ``m_i = omega_i`` its chain is the weighted problem's (module docstring)."""
    weights = problem.weights
    D = sp.csr_matrix(sp.diags(weights) @ problem.D) if sp.issparse(problem.D) else problem.D * weights[:, None]
    blocked = problem.blocked
    if blocked is not None:
        blocked = BlockedFactor(blocked.codes, blocked.values * weights[:, None], blocked.n_levels)
    return replace(problem, D=D, blocked=blocked, weights=None)


def row_margins(margins: np.ndarray | None, y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``m_i - y_i f_i`` (``m_i = 1`` where ``margins`` is None): the hinge's argument."""
    return (1.0 if margins is None else margins) - y * f


def linear_terms(y: np.ndarray, omega: np.ndarray, margins: np.ndarray | None) -> np.ndarray:
    """``y_i (1 + m_i w_i)``: the rows' linear terms of ``theta | w`` (``m_i = 1`` where ``margins`` is None)."""
    return y * (1.0 + (omega if margins is None else margins * omega))


def sparse_coefficient_draw(
    problem: VBProblem,
    omega: np.ndarray,
    precisions: list[np.ndarray],
    rng: np.random.Generator,
    margins: np.ndarray | None = None,
    rhs: np.ndarray | None = None,
) -> np.ndarray:
    """``theta | w, Sigma`` on the sparse path (Luts & Ormerod 2014, App. A, step 1): ``N(P^-1 C'y(1 + w), P^-1)``
    with ``P = C' diag(w) C + prior``, by elimination onto a dense Schur complement where the problem's layout
    allows it (crossed factors), else by a sparse Cholesky factor (``margins``: :func:`linear_terms`; ``rhs``: the
    rows' linear terms as given)."""
    D = problem.D
    rhs = linear_terms(problem.y, omega, margins) if rhs is None else rhs
    prior = sparse_prior(problem, precisions)
    if problem.elimination is not None:
        return schur_sparse_draw(problem.elimination, omega, rhs, prior, rng)
    factor = SparseCholesky.factor((D.T @ sp.diags(omega) @ D + prior).tocsc())
    return factor.solve(D.T @ rhs) + factor.sample_deviation(rng, 1)[0]


def dense_coefficient_draw(
    D: np.ndarray,
    omega: np.ndarray,
    y: np.ndarray,
    prior_dd: np.ndarray,
    blocked: BlockedFactor | None,
    prior_b: np.ndarray | None,
    rng: np.random.Generator,
    stats: RowStatistics | None,
    margins: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``theta | w, Sigma`` on the dense path (Luts & Ormerod 2014, App. A, step 1) by
    :func:`linalg.gaussian_draw`; for a random intercept whose level sums the compiled row pass gave, by
    :func:`compiled_rows.intercept_draw` on the same standard normals (the same draw, without the general path's
    temporaries: about a fifth of an iteration on toenail)."""
    if stats is not None and stats.levels is not None and blocked is not None and blocked.K == 1:
        # (the level sums come only from the compiled row pass: numba is there)
        q, J = D.shape[1], blocked.n_levels
        eps_d, eps_b = rng.standard_normal(q), rng.standard_normal((J, 1))
        theta_d, theta_b = np.empty(q), np.empty((J, 1))
        levels = stats.levels
        drawn = compiled_rows.intercept_draw(
            stats.gram, stats.product, prior_dd, levels.blocks, levels.cross, levels.rhs, float(prior_b[0, 0]),
            eps_d, eps_b, theta_d, theta_b,
        )  # fmt: skip
        if drawn:
            return theta_d, theta_b
    return gaussian_draw(D, omega, linear_terms(y, omega, margins), prior_dd, blocked, prior_b, rng, stats=stats)


def chain_draws(
    problem: VBProblem,
    tune: int,
    thin: int,
    seed: np.random.SeedSequence,
    interweave: bool = True,
    tick=None,
    whole: bool = True,
):
    """One chain, as a generator: after ``tune`` iterations it yields ``(theta_d, theta_b, covs, log
    pseudo-likelihood)`` every ``thin`` iterations (:func:`stack_draws` adds the log prior), for as long as it is
    asked (``draws="auto"`` keeps asking until the chains agree).  ``tick()`` is called once per iteration (a
    progress bar).

    Each iteration: ``theta | w, Sigma`` (Luts & Ormerod 2014, App. A, step 1); with ``interweave``, with ``w``
    integrated out, the random intercepts' effects given the rest (on levels of few rows; collapsed_variance), one
    rescaling move of ``(theta, Sigma)`` per coordinate of every random-effect term, one global rescaling and one
    update of each fixed-effect coefficient given the rest (:mod:`bayesvm.engines.linear.interweave`; False gives the
    paper's sampler, kept for comparison) and then each random intercept's variance with its random effects
    integrated out, and they given it (:mod:`bayesvm.engines.linear.collapsed_variance`); ``w | theta``
    (step 2); ``Sigma | theta`` (step 3).  With ``interweave`` the draw of each random-effect term's variance in step
    3 is over-relaxed after tuning (:mod:`bayesvm.engines.overrelax`, ``alpha = RELAXATION``).
    """
    rng = np.random.default_rng(seed)
    _, problem = sorted_by_level(problem)
    margins = problem.weights  # class weights: margins on the scaled design, the paper's sampler (module docstring)
    if margins is not None:
        problem, interweave, whole = scaled_by_weights(problem), False, False
    y, D, blocked = problem.y, problem.D, problem.blocked
    sparse = sp.issparse(D)
    # over-dispersed start: omega and the components' precisions jittered around 1
    omega = np.exp(rng.normal(0.0, 0.5, y.size))
    covs = [np.eye(c.k) * np.exp(rng.normal(0.0, 0.5)) for c in problem.components]
    aux: list = [None] * len(problem.components)  # half-t auxiliary variables
    latent = LatentDraws(rng, y.size, split=level_boundary_split(None if sparse else blocked, y.size))
    rows = None if sparse else DenseRows(D, y, blocked, latent, margins=margins)
    stats = None if sparse else row_statistics(D, omega, linear_terms(y, omega, margins), blocked)
    mover = ScaleMoves(problem) if interweave and problem.components else None
    fixed_diagonal = np.diag(problem.fixed_precision).astype(float)  # (the prior precision's fixed part, copied)
    collapsed = CollapsedVariance(problem, tune) if mover is not None else None
    if collapsed is not None and not collapsed.has_moves:
        collapsed = None
    fused = FusedIteration(problem, rows, mover, collapsed, MARGIN_FLOOR, enabled=whole)
    step, refused = 0, False
    # (FusedIteration.run's first call takes the state before its first theta | w, which overwrites it)
    theta_d = np.zeros(D.shape[1])
    theta_b = np.zeros((blocked.n_levels, blocked.K)) if blocked is not None else np.zeros((0, 0))
    while True:
        # the over-relaxed variance draws (overrelax) once tuning is over: the schedule of the collapsed step is
        # settled during tuning from the lag-1 autocorrelation of the variance's ordinary draws, which over-relaxing
        # would hide
        relaxation = RELAXATION if interweave and step >= tune else 0.0
        if fused.ready and not refused and stats.levels is not None:
            # whole iterations in one compiled call where nothing else is due (fused_iteration.FusedIteration.run)
            count = collapsed.quiet_steps(step, min(BATCH, tune - step) if step < tune else BATCH)
            if count:
                batch = fused.run(count, theta_d, theta_b, covs, aux, stats, rng, relaxation)
                theta_d, theta_b, covs, aux, stats, omega = (batch.theta_d, batch.theta_b, batch.covs, batch.aux,
                                                             batch.stats, batch.omega)  # fmt: skip
                refused = batch.refused
                yield from _batch_draws(batch, step, tune, thin, collapsed, tick)
                step += batch.completed
                if not refused:
                    continue
        if sparse:
            precisions = [spd_inverse(c) for c in covs]
            theta_d = sparse_coefficient_draw(problem, omega, precisions, rng, margins)
            theta_b = np.zeros((0, 0))
            if mover is not None:  # before w | theta, which it needs (interweave module)
                f = D @ theta_d
                if collapsed is not None:  # u | beta, Sigma with w integrated out (collapsed_variance)
                    collapsed.level_draws(theta_d, theta_b, covs, f, rng)
                theta_d, theta_b, covs, f = mover(theta_d, theta_b, covs, aux, f, rng)
                if collapsed is not None:  # w integrated out too (collapsed_variance)
                    theta_d, theta_b, covs, _ = collapsed(theta_d, theta_b, covs, aux, f, rng, step)
            margin = row_margins(margins, y, D @ theta_d)
            loglik = -2.0 * float(np.sum(np.maximum(margin, 0.0)))
            omega = latent(np.maximum(np.abs(margin), MARGIN_FLOOR))
        else:
            if refused:  # the compiled run's theta | w refused after drawing its normals: the fallback below
                drawn, refused = None, False
            else:
                drawn = fused.coefficient_draw(covs, stats, rng) if fused.ready and stats.levels is not None else None
            if drawn is not None:  # the prior precisions and the draw in one compiled call (fused_iteration)
                theta_d, theta_b = drawn
            else:
                prior_dd, prior_b = prior_precisions(problem, [spd_inverse(c) for c in covs], fixed_diagonal)
                if fused.ready and stats.levels is not None:  # (its normals drawn: the compiled draw's fallback)
                    theta_d, theta_b = gaussian_draw(D, omega, linear_terms(y, omega, margins), prior_dd, blocked,
                                                     prior_b, rng, stats=stats)  # fmt: skip
                else:
                    theta_d, theta_b = dense_coefficient_draw(
                        D, omega, y, prior_dd, blocked, prior_b, rng, stats, margins
                    )
            due = collapsed.due(step) if collapsed is not None else []
            if fused.ready and not due:  # the rest of the iteration in one compiled call (fused_iteration)
                batch = fused.run(1, theta_d, theta_b, covs, aux, stats, rng, relaxation, drawn_first=True)
                theta_d, theta_b, covs, aux, stats, omega = (batch.theta_d, batch.theta_b, batch.covs, batch.aux,
                                                             batch.stats, batch.omega)  # fmt: skip
                yield from _batch_draws(batch, step, tune, thin, collapsed, tick)
                step += 1
                continue
            else:
                if mover is not None:  # before w | theta, which it needs (interweave module)
                    f = rows.predictor(theta_d, theta_b)
                    if collapsed is not None:  # u | beta, Sigma with w integrated out (collapsed_variance)
                        collapsed.level_draws(theta_d, theta_b, covs, f, rng)
                    theta_d, theta_b, covs, f = mover(theta_d, theta_b, covs, aux, f, rng)
                    if collapsed is not None:  # w integrated out too (collapsed_variance)
                        theta_d, theta_b, covs, _ = collapsed(theta_d, theta_b, covs, aux, f, rng, step, due)
                loglik, omega, stats = rows(theta_d, theta_b)  # omega | theta, and the next draw's row sums
        covs = draw_components(
            problem.components, [component_values(c, theta_d, theta_b) for c in problem.components], rng, aux, covs,
            relaxation,
        )  # fmt: skip
        if tick is not None:
            tick()
        kept = step - tune
        if kept >= 0 and kept % thin == 0:
            yield (
                np.array(theta_d, copy=True),
                np.array(theta_b, copy=True),
                [np.array(c, copy=True) for c in covs],
                loglik,
            )
        step += 1


def _batch_draws(batch, step: int, tune: int, thin: int, collapsed: CollapsedVariance, tick):
    """The kept draws of a compiled run of iterations (:meth:`FusedIteration.run`) whose first is iteration ``step``,
    as :func:`chain_draws` yields them, with each iteration's tuning record of the collapsed step and progress tick."""
    J = batch.theta_b.shape[0]
    for i in range(batch.completed):
        collapsed.record(step + i, [np.array([[v]]) for v in batch.moved[i]])
        if tick is not None:
            tick()
        kept = step + i - tune
        if kept >= 0 and kept % thin == 0:
            covs = [np.array([[v]]) for v in batch.variances[i]]
            yield batch.draws_d[i].copy(), batch.draws_b[i].reshape(J, 1).copy(), covs, float(batch.loglik[i])


#: ``draws="auto"``: draws per chain between checks, the targets (every monitored quantity) and the caps.
AUTO_BATCH = 250
AUTO_RHAT, AUTO_ESS = 1.01, 400
AUTO_MAX_DRAWS = 20_000
AUTO_MAX_SECONDS = 600.0


def _default_monitor(problem: VBProblem):
    """The quantities ``draws="auto"`` watches when the caller names none: the coefficients outside every
    variance component (the fixed effects) and the SDs of every component."""
    in_component = np.zeros(problem.D.shape[1], dtype=bool)
    for comp in problem.components:
        if not comp.blocked:
            in_component[comp.index.ravel()] = True
    keep = np.flatnonzero(~in_component)

    def monitor(theta_d: np.ndarray, components: list[np.ndarray]) -> np.ndarray:
        parts = [theta_d[..., keep]]
        parts += [np.sqrt(np.diagonal(c, axis1=-2, axis2=-1)) for c in components]
        return np.concatenate(parts, axis=-1)

    return monitor


def _rhat_and_ess(values: np.ndarray) -> tuple[float, float]:
    """Largest rank-normalised R-hat and smallest bulk ESS (ArviZ) over ``values (chains, draws, m)``; a
    quantity that never moves (NaN) counts as converged."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az

        dataset = az.convert_to_dataset({"q": values})
        rhat = np.asarray(az.rhat(dataset)["q"].values, dtype=float)
        ess = np.asarray(az.ess(dataset, method="bulk")["q"].values, dtype=float)
    rhat, ess = rhat[np.isfinite(rhat)], ess[np.isfinite(ess)]
    return (float(rhat.max()) if rhat.size else 1.0), (float(ess.min()) if ess.size else float("inf"))


def sample_until_converged(
    problem: VBProblem,
    tune: int,
    thin: int,
    chains: int,
    seed,
    progress: bool,
    monitor=None,
    interweave: bool = True,
    max_draws: int | None = None,
    max_seconds: float | None = None,
) -> tuple[list[dict], str]:
    """``draws="auto"`` for this sampler: :func:`run_until_converged` on its chains (:func:`chain_draws`), watching
    ``monitor(theta_d, components)`` (``(chains, draws, m)``; default: the fixed effects and the components'
    SDs); returns the chains' dicts and the stopping reason."""
    monitor = monitor or _default_monitor(problem)
    seeds = np.random.SeedSequence(seed).spawn(chains)
    whole = _whole_iterations_at_hand()  # (as sample_gibbs: the same draws as a fixed-length run of the seed)
    streams = [chain_draws(problem, tune, thin, s, interweave, whole=whole) for s in seeds]
    n_components = len(problem.components)

    def watched(records: list[list]) -> np.ndarray:
        theta_d = np.stack([np.stack([r[0] for r in kept]) for kept in records])
        comps = [np.stack([np.stack([r[2][c] for r in kept]) for kept in records]) for c in range(n_components)]
        return monitor(theta_d, comps)

    with blas_threads(problem.D.shape[1], problem.n):
        records, reason = run_until_converged(streams, watched, progress, max_draws, max_seconds)
    return [stack_draws(kept, problem) for kept in records], reason


def run_until_converged(
    streams: list, watched, progress: bool, max_draws: int | None = None, max_seconds: float | None = None
) -> tuple[list[list], str]:
    """``draws="auto"`` for any sampler: take ``AUTO_BATCH`` draws from each chain's generator in turn (the chains
    side by side in this process) until every quantity ``watched(records)`` returns (``(chains, draws, m)``) has
    R-hat <= ``AUTO_RHAT`` and bulk ESS >= ``AUTO_ESS``, or ``max_draws`` per chain or ``max_seconds`` are reached
    (default ``AUTO_MAX_DRAWS``, ``AUTO_MAX_SECONDS``); returns each chain's kept records and the stopping reason.
    The progress bar (on a terminal) shows the largest R-hat and the smallest ESS as it goes."""
    max_draws = AUTO_MAX_DRAWS if max_draws is None else max_draws
    max_seconds = AUTO_MAX_SECONDS if max_seconds is None else max_seconds
    chains = len(streams)
    records: list[list] = [[] for _ in streams]
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"Gibbs ({chains} chains, until R-hat <= {AUTO_RHAT} and ESS >= {AUTO_ESS})", leave=False)
    start = time.perf_counter()
    try:
        while True:
            for stream, kept in zip(streams, records):
                kept.extend(next(stream) for _ in range(AUTO_BATCH))
            n = len(records[0])
            rhat, ess = _rhat_and_ess(watched(records))
            if bar is not None:
                bar.update(AUTO_BATCH * chains)
                bar.set_postfix({"draws/chain": n, "max R-hat": f"{rhat:.3f}", "min ESS": f"{ess:.0f}"})
            elapsed = time.perf_counter() - start
            if rhat <= AUTO_RHAT and ess >= AUTO_ESS:
                reason = f"converged after {n} draws per chain: max R-hat {rhat:.3f}, min bulk ESS {ess:.0f}"
                break
            if n >= max_draws or elapsed >= max_seconds:
                cap = f"{max_draws} draws per chain" if n >= max_draws else f"{max_seconds:.0f} s"
                reason = (
                    f"stopped at the cap of {cap} ({n} draws per chain): max R-hat {rhat:.3f}, min bulk ESS {ess:.0f}"
                )
                break
    finally:
        for stream in streams:
            stream.close()
        if bar is not None:
            bar.close()
    return records, reason


def run_chains(
    chain, problem, draws: int, tune: int, thin: int, chains: int, seed, cores: int, progress: bool, warm_up=None
):
    """``chain(problem, draws, tune, thin, seed_sequence, show)`` for each of ``chains`` independent seeds
    spawned from ``SeedSequence(seed)``: in ``min(cores, chains)`` processes at a time when ``cores > 1`` (the
    same draws as serially; :func:`bayesvm.engines.workers.run_in_processes`: on Ctrl-C or SIGTERM the workers end
    too), with a tqdm bar on a terminal.  Shared by every Gibbs engine.

    ``warm_up()``, where given, runs in this process before the workers are forked (not where they would be
    spawned): what it loads (numba's compiled functions, from its disk cache on first use) every worker then
    inherits instead of loading it again.
    """
    seeds = np.random.SeedSequence(seed).spawn(chains)
    show = progress and sys.stderr.isatty()
    if cores <= 1 or chains <= 1:
        return [chain(problem, draws, tune, thin, s, show) for s in seeds]
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=chains, desc=f"Gibbs ({chains} chains)", leave=False)
    try:
        return run_in_processes(
            [(chain, (problem, draws, tune, thin, s, False)) for s in seeds],
            cores,
            "Gibbs chain",
            warm_up=warm_up,
            on_result=None if bar is None else lambda index: bar.update(),
        )
    finally:
        if bar is not None:
            bar.close()


TUNE = 1000
"""Default burn-in of this sampler, the imputation sampler's and ``bsvm``'s for every Gibbs fit but the selection
priors' (:data:`bayesvm.engines.selection.gibbs.TUNE`; :func:`bayesvm.control.default_tune`)."""


def sample_gibbs(
    problem: VBProblem,
    draws: int = 1000,
    tune: int = TUNE,
    chains: int = 4,
    thin: int = 1,
    seed: int | None = None,
    cores: int = 1,
    progress: bool = True,
    _interweave: bool = True,
    monitor=None,
) -> GibbsResult:
    """Run ``chains`` Gibbs chains; in parallel processes when ``cores > 1``.  ``_interweave=False`` runs the
    paper's sampler without the interweaving moves (for the mixing benchmark's comparison).

    ``draws="auto"`` samples until every quantity of ``monitor`` (default: the fixed effects and the
    components' SDs) has R-hat <= 1.01 and bulk ESS >= 400, in batches, the chains side by side in this
    process, up to ``AUTO_MAX_DRAWS`` draws per chain or ``AUTO_MAX_SECONDS`` (:func:`sample_until_converged`).
    """
    start = time.perf_counter()
    if draws == "auto":
        runs, stopping = sample_until_converged(
            problem, tune, thin, chains, seed, progress, monitor=monitor, interweave=_interweave
        )
        return _gibbs_result(runs, problem, start, tune, thin, seed, stopping)
    size = problem.D.shape[1] + (0 if problem.blocked is None else problem.blocked.n_levels * problem.blocked.K)
    size += sum(c.k * c.k for c in problem.components)
    check_memory(
        8.0 * chains * draws * size * 2,
        f"storing {chains} x {draws} draws of {size} parameters",
        "use fewer draws, thin=k, or method='vb'",
    )
    whole = _whole_iterations_at_hand()
    chain = partial(_run_chain, interweave=_interweave, whole=whole)
    warm_up = partial(_load_compiled, chain, problem) if compiled_rows.available() else None
    runs = run_chains(chain, problem, draws, tune, thin, chains, seed, cores, progress, warm_up)
    if not whole and _interweave:
        _compile_whole_iterations_in_background(problem)
    return _gibbs_result(runs, problem, start, tune, thin, seed)


def _whole_iterations_at_hand() -> bool:
    """Whether the chains use the compiled whole iterations (:mod:`.fused_iteration`): where numba has them on disk
    when this process first asks, and from then on in this process (so that a seed gives the same draws in every fit
    of a process).  A process that finds them missing (the first after install) compiles only the separate steps
    (about half the compiling; the same chain to rounding) and says once that it is compiling; the whole iterations
    are then compiled in the background (:func:`_compile_whole_iterations_in_background`) for later processes."""
    if not compiled_rows.available():
        return False
    if not _decided:
        if not compiled.on_disk(compiled_rows.row_pass):
            compiled.say_once(
                "gibbs",
                "compiling the Gibbs sampler for this machine; this happens once (numba keeps the compiled code on "
                "disk for later fits)",
            )
        _decided.append(compiled.on_disk(fused_iteration.fused_chain))
    return _decided[0]


_decided: list[bool] = []


_background: list = []


def _compile_whole_iterations_in_background(problem: VBProblem) -> None:
    """Compile the whole iterations for later processes, once per process: a detached, low-priority interpreter
    (:mod:`bayesvm.engines.linear.compile_ahead`) makes two throwaway iterations of a chain with them on a small
    problem of the same layout, so that numba writes them to its disk cache; it goes on after this process ends, and
    only one runs at a time on a machine."""
    import subprocess
    import sys

    if _background:
        return
    _background.append(True)
    try:
        subprocess.Popen(
            [sys.executable, "-m", "bayesvm.engines.linear.compile_ahead"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:  # no process to be had: the next process compiles them instead
        pass


def _load_compiled(chain, problem: VBProblem) -> None:
    """Two throwaway iterations of ``chain`` (its own seed; no chain's random numbers; the second, with no collapsed
    step due, runs the compiled whole iterations of ``fused_iteration`` where the problem has their structure), so
    that numba loads the compiled functions the chains call into this process before the chains' workers fork from
    it; otherwise each worker loads them again."""
    chain(problem, 2, 0, 1, np.random.SeedSequence(0), False)


def _gibbs_result(runs, problem, start, tune, thin, seed, stopping=None) -> GibbsResult:
    return GibbsResult(
        theta_d=np.stack([r["theta_d"] for r in runs]),
        theta_b=np.stack([r["theta_b"] for r in runs]),
        components=[np.stack([r["components"][c] for r in runs]) for c in range(len(problem.components))],
        log_posterior=np.stack([r["log_posterior"] for r in runs]),
        elapsed=time.perf_counter() - start,
        tune=tune,
        thin=thin,
        seed=seed,
        stopping=stopping,
    )
