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
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy import stats

from ..memory import check_memory
from .joint import component_values, log_prior, log_pseudo_likelihood
from .linalg import (
    SPLIT_ROWS,
    BlockedFactor,
    RowStatistics,
    _gram_and_product,
    blas_threads,
    gaussian_draw,
    row_pool,
    row_statistics,
    splits_rows,
)
from .sparse import SparseCholesky
from .sparse_schur import schur_sparse_draw
from .vb import VarianceComponent, VBProblem, _prior_precisions, _sparse_prior, sorted_by_level

#: Smallest |1 - y f| used for the inverse-Gaussian mean (a draw exactly on the margin has probability 0).
MARGIN_FLOOR = 1e-12


class LatentDraws:
    """``omega_i ~ InverseGaussian(1 / margin_i, 1)`` for every row (Appendix A).

    On many rows (:data:`linalg.SPLIT_ROWS`) the rows are split in two fixed halves, each with its own
    generator spawned from the chain's, drawn in two threads (numpy releases the GIL inside
    ``Generator.wald``): 23 ms against 38 ms per iteration at a million rows.  The split does not
    depend on the machine, so a seed gives the same chain everywhere.
    """

    def __init__(self, rng: np.random.Generator, n: int):
        self.rng = rng
        self.split = n >= SPLIT_ROWS
        if self.split:
            self.halves = [slice(0, n // 2), slice(n // 2, n)]
            children = np.random.SeedSequence(rng.integers(2**63, size=4)).spawn(2)
            self.generators = [np.random.default_rng(child) for child in children]

    def __call__(self, margin: np.ndarray) -> np.ndarray:
        if not self.split:
            return self.rng.wald(1.0 / margin, 1.0)
        out = np.empty(margin.size)

        def draw(half: int) -> None:
            rows = self.halves[half]
            out[rows] = self.generators[half].wald(1.0 / margin[rows], 1.0)

        list(row_pool().map(draw, range(2)))
        return out


class DenseRows:
    """The row-wise half of a dense-path iteration: ``f = C theta``, ``omega | theta`` and the row sums of the
    next ``theta`` draw (:class:`linalg.RowStatistics`).

    Where the rows split (:func:`linalg.splits_rows`) all of it runs in the two fixed halves of
    :class:`LatentDraws`, one thread each, in one hand-off per iteration; the per-level sums (sparse
    products, which hold the GIL) stay in the caller.  The draws are those of :class:`LatentDraws`.
    """

    def __init__(self, D: np.ndarray, y: np.ndarray, blocked: BlockedFactor | None, latent: LatentDraws):
        self.D, self.y, self.blocked, self.latent = D, y, blocked, latent
        n = y.size
        self.fused = latent.split and splits_rows(n, D.shape[1])
        self.f, self.omega = np.empty(n), np.empty(n)
        if self.fused and blocked is not None:
            K = blocked.K
            self.wz, self.wzz, self.zr = np.empty((n, K)), np.empty((n, K * K)), np.empty((n, K))

    def predictor(self, theta_d: np.ndarray, theta_b: np.ndarray, rows: slice = slice(None)) -> np.ndarray:
        """``f`` on ``rows`` (no ``(n, K)`` temporaries)."""
        f = self.D[rows] @ theta_d
        if self.blocked is not None:
            codes, values = self.blocked.codes[rows], self.blocked.values[rows]
            for k in range(self.blocked.K):
                f += values[:, k] * theta_b[codes, k]
        return f

    def __call__(self, theta_d: np.ndarray, theta_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, RowStatistics]:
        if not self.fused:
            f = self.predictor(theta_d, theta_b)
            omega = self.latent(np.maximum(np.abs(1.0 - self.y * f), MARGIN_FLOOR))
            return f, omega, row_statistics(self.D, omega, self.y * (1.0 + omega), self.blocked)
        parts = list(row_pool().map(lambda h: self._half(h, theta_d, theta_b), range(2)))
        gram = parts[0][0] + parts[1][0]
        stats = RowStatistics(0.5 * (gram + gram.T), parts[0][1] + parts[1][1])
        if self.blocked is not None:
            stats = RowStatistics(stats.gram, stats.product, self.wz, self.wzz, self.zr)
        return self.f, self.omega, stats

    def _half(self, h: int, theta_d: np.ndarray, theta_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = self.latent.halves[h]
        f = self.f[rows] = self.predictor(theta_d, theta_b, rows)
        y = self.y[rows]
        omega = self.omega[rows] = self.latent.generators[h].wald(
            1.0 / np.maximum(np.abs(1.0 - y * f), MARGIN_FLOOR), 1.0
        )
        r = y * (1.0 + omega)
        if self.blocked is not None:  # as linalg.row_statistics, written straight into the buffers (measured:
            # returning temporaries and copying them in cost 10 ms per iteration at 10^6 rows)
            z = self.blocked.values[rows]
            wz = self.wz[rows] = z * omega[:, None]
            self.wzz[rows] = (wz[:, :, None] * z[:, None, :]).reshape(z.shape[0], -1)
            self.zr[rows] = z * r[:, None]
        return _gram_and_product(self.D[rows], omega, r)


@dataclass
class GibbsResult:
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

    theta_d: np.ndarray
    theta_b: np.ndarray
    components: list[np.ndarray]
    log_posterior: np.ndarray
    elapsed: float
    tune: int
    thin: int
    seed: int | None

    @property
    def chains(self) -> int:
        return self.theta_d.shape[0]

    @property
    def draws(self) -> int:
        return self.theta_d.shape[1]


def _draw_component(comp: VarianceComponent, u: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``sigma^2 | u`` (IG) or ``Sigma | u`` (IW), as a ``k x k`` matrix."""
    if comp.is_wishart:
        scale = comp.prior_scale + u.T @ u
        return np.atleast_2d(stats.invwishart(df=comp.prior_df + comp.n_levels, scale=scale).rvs(random_state=rng))
    shape = comp.prior_a + 0.5 * u.size
    rate = comp.prior_b + 0.5 * float(np.sum(u**2))
    return np.array([[rate / rng.gamma(shape)]])


def _run_chain(problem: VBProblem, draws: int, tune: int, thin: int, seed: np.random.SeedSequence, show: bool) -> dict:
    with blas_threads(problem.D.shape[1], problem.n):
        return _chain(problem, draws, tune, thin, seed, show)


def _chain(problem: VBProblem, draws: int, tune: int, thin: int, seed: np.random.SeedSequence, show: bool) -> dict:
    rng = np.random.default_rng(seed)
    _, problem = sorted_by_level(problem)
    y, D, blocked = problem.y, problem.D, problem.blocked
    sparse = sp.issparse(D)
    # over-dispersed start: omega and the components' precisions jittered around 1
    omega = np.exp(rng.normal(0.0, 0.5, y.size))
    covs = [np.eye(c.k) * np.exp(rng.normal(0.0, 0.5)) for c in problem.components]
    total = tune + draws * thin
    out_d = np.empty((draws, D.shape[1]))
    out_b = None
    out_c = [np.empty((draws, c.k, c.k)) for c in problem.components]
    out_lp = np.empty(draws)
    latent = LatentDraws(rng, y.size)
    rows = None if sparse else DenseRows(D, y, blocked, latent)
    stats = None if sparse else row_statistics(D, omega, y * (1.0 + omega), blocked)
    steps = range(total)
    if show:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="Gibbs", leave=False)
    for step in steps:
        precisions = [np.linalg.inv(c) for c in covs]
        if sparse:
            rhs = y * (1.0 + omega)
            prior = _sparse_prior(problem, precisions)
            if problem.elimination is not None:  # crossed factors: dense Schur complement
                theta_d = schur_sparse_draw(problem.elimination, omega, rhs, prior, rng)
            else:
                factor = SparseCholesky.factor((D.T @ sp.diags(omega) @ D + prior).tocsc())
                theta_d = factor.solve(D.T @ rhs) + factor.sample_deviation(rng, 1)[0]
            theta_b = np.zeros((0, 0))
            f = D @ theta_d
            omega = latent(np.maximum(np.abs(1.0 - y * f), MARGIN_FLOOR))
        else:
            prior_dd, prior_b = _prior_precisions(problem, precisions)
            theta_d, theta_b = gaussian_draw(D, omega, None, prior_dd, blocked, prior_b, rng, stats=stats)
            f, omega, stats = rows(theta_d, theta_b)  # omega | theta, and the next draw's row sums
        covs = [_draw_component(c, component_values(c, theta_d, theta_b), rng) for c in problem.components]
        kept = step - tune
        if kept >= 0 and kept % thin == 0:
            i = kept // thin
            out_d[i] = theta_d
            if out_b is None:
                out_b = np.empty((draws,) + theta_b.shape)
            out_b[i] = theta_b
            for store, cov in zip(out_c, covs):
                store[i] = cov
            out_lp[i] = log_pseudo_likelihood(y, f) + log_prior(problem, theta_d, theta_b, covs)
    return {"theta_d": out_d, "theta_b": out_b, "components": out_c, "log_posterior": out_lp}


def run_chains(chain, problem, draws: int, tune: int, thin: int, chains: int, seed, cores: int, progress: bool):
    """``chain(problem, draws, tune, thin, seed_sequence, show)`` for each of ``chains`` independent seeds
    spawned from ``SeedSequence(seed)``: in ``min(cores, chains)`` processes when ``cores > 1`` (the same
    draws as serially), with a tqdm bar on a terminal.  Shared by every Gibbs engine."""
    seeds = np.random.SeedSequence(seed).spawn(chains)
    show = progress and sys.stderr.isatty()
    if cores > 1 and chains > 1:
        with ProcessPoolExecutor(max_workers=min(cores, chains)) as pool:
            futures = [pool.submit(chain, problem, draws, tune, thin, s, False) for s in seeds]
            if show:
                from tqdm.auto import tqdm

                futures = tqdm(futures, desc=f"Gibbs ({chains} chains)", leave=False)
            return [f.result() for f in futures]
    return [chain(problem, draws, tune, thin, s, show) for s in seeds]


def sample_gibbs(
    problem: VBProblem,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    thin: int = 1,
    seed: int | None = None,
    cores: int = 1,
    progress: bool = True,
) -> GibbsResult:
    """Run ``chains`` Gibbs chains; in parallel processes when ``cores > 1``."""
    start = time.perf_counter()
    size = problem.D.shape[1] + (0 if problem.blocked is None else problem.blocked.n_levels * problem.blocked.K)
    size += sum(c.k * c.k for c in problem.components)
    check_memory(
        8.0 * chains * draws * size * 2,
        f"storing {chains} x {draws} draws of {size} parameters",
        "use fewer draws, thin=k, or method='vb'",
    )
    runs = run_chains(_run_chain, problem, draws, tune, thin, chains, seed, cores, progress)
    return GibbsResult(
        theta_d=np.stack([r["theta_d"] for r in runs]),
        theta_b=np.stack([r["theta_b"] for r in runs]),
        components=[np.stack([r["components"][c] for r in runs]) for c in range(len(problem.components))],
        log_posterior=np.stack([r["log_posterior"] for r in runs]),
        elapsed=time.perf_counter() - start,
        tune=tune,
        thin=thin,
        seed=seed,
    )
