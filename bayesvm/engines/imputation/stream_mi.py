"""Multiple imputation of out-of-core rows (``missing="impute"`` on a dask frame; ``imputation="mi"``).

The model and the pooled posterior are those of :mod:`bayesvm.engines.imputation.multiple`: the predictors given the
class, ``z_i | y_i ~ N(B' u_i, Sigma)`` (:mod:`bayesvm.engines.imputation.normal_model`), sampled by data augmentation;
``M`` thinned draws of the completed data, a VB fit on each, the ``M`` posteriors pooled as a mixture.  What changes
out of core is where each piece lives:

* **The chain, one pass per step.**  Given ``(B, Sigma)`` (broadcast), each partition draws its rows' missing entries
  from their conditional normal (:func:`~bayesvm.engines.imputation.normal_model.draw_missing`, with a generator seeded
  per partition and step) and returns ``U'z`` (2 x V) and ``z'z`` (V x V) of its completed rows; the driver draws the
  next ``(B, Sigma)`` from the added sums (:func:`~bayesvm.engines.imputation.normal_model.draw_model`, with
  ``(z - U B)'(z - U B) = z'z - B'U'z - z'U B + B'U'U B``).  The rows' draws stay on the workers: each partition keeps
  the missing entries of the kept steps (persisted, :class:`bayesvm.outofcore.PartitionPasses`); only the sums reach
  the driver.
* **A streamed fit per completed data set.**  The partitions' design rows with imputation ``m`` filled in
  (``alpha + gamma z``, the engine's scale) are derived beside them, fitted by streamed mean-field VB
  (:func:`bayesvm.engines.linear.stream_vb.fit_streamed_vb`) or the streamed accurate fit
  (:func:`bayesvm.engines.linear.stream_ep.fit_streamed_accurate`), then released.
* **The imputed values' summaries** (each missing entry's mean and SD over the ``M`` imputations, with its row's label
  in the frame) come back in one last pass; the per-row draws are never gathered.

The pooled draws carry no log pseudo-posterior (it needs every row at every draw: ``M x draws`` predictors per row).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...model.problems import VBProblem
from .joint_model import ImputedGibbsDraws
from .multiple import MultipleImputationResult, completed_data_draws, pooling
from .normal_model import draw_missing, draw_model, marginal_moments, missing_patterns


@dataclass(frozen=True, eq=False)
class ImputedPartition:
    """One partition's rows for the imputation chain: the engine rows (placeholders in the imputed columns), ``z``
    (``(rows, V)``, standardised, 0 where missing), the missing mask, its patterns and the rows' labels."""

    rows: object
    z: np.ndarray
    missing: np.ndarray
    patterns: list
    labels: np.ndarray


def imputation_rows(transform, mean: np.ndarray, sd: np.ndarray):
    """``rows(new) -> ImputedPartition``: the engine rows ``transform(new)`` with the imputation variables on the
    imputation scale ``z = (d - mean) / sd`` (:meth:`bayesvm.model.LinearModel.imputation_scaling`)."""

    def rows(new):
        raw = np.zeros((new.X.shape[0], mean.size)) if new.imputation_values is None else new.imputation_values
        z = (raw - mean) / sd
        missing = np.isnan(z)
        labels = np.asarray(new.labels) if new.labels is not None else np.arange(z.shape[0])
        return ImputedPartition(transform(new), np.where(missing, 0.0, z), missing, missing_patterns(missing), labels)

    return rows


def chain_step(part: ImputedPartition, y: np.ndarray, seed: int, B: np.ndarray, sigma: np.ndarray):
    """One partition's share of a data-augmentation step: its missing entries drawn given ``(B, Sigma)``; returns them
    (the partition's state) and the sums ``(U'z, z'z)`` of its completed rows."""
    z = part.z.copy()
    U = np.column_stack([np.ones(y.size), y])
    draw_missing(z, part.patterns, U @ B, sigma, np.random.default_rng(seed))
    return z[part.missing], (U.T @ z, z.T @ z)


def completed_rows(part: ImputedPartition, y: np.ndarray, cells: np.ndarray, columns, alpha, gamma):
    """The partition's engine rows with one imputation's missing entries filled in (``D[:, columns] = alpha + gamma
    z``); the rows of the streamed fits."""
    z = part.z.copy()
    z[part.missing] = cells
    rows = part.rows
    D = (rows[0] if isinstance(rows, tuple) else rows).copy()
    D[:, columns] = alpha + gamma * z
    return ((D, *rows[1:]) if isinstance(rows, tuple) else D), y


def cell_summaries(part: ImputedPartition, y: np.ndarray, kept: tuple):
    """Each missing entry of the partition: its row's label, its variable, and its mean and SD (``ddof=1``) over the
    kept imputations."""
    rows, columns = np.nonzero(part.missing)
    draws = np.stack(kept) if kept else np.zeros((0, rows.size))
    sd = draws.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros(rows.size)
    return part.labels[rows], columns, draws.mean(axis=0), sd


@dataclass(frozen=True)
class StreamedImputation:
    """The driver's side of the imputation model: ``y`` (every row), the imputed columns of the design and their map
    ``alpha + gamma z``, and the prior ``B ~ MN(0, s^2 I_2, Sigma)``, ``Sigma ~ IW(df, scale)``."""

    y: np.ndarray
    columns: np.ndarray
    alpha: np.ndarray
    gamma: np.ndarray
    mean_variance: float
    df: float
    scale: np.ndarray

    @property
    def V(self) -> int:
        return self.columns.size


@dataclass
class StreamedImputedDraws(ImputedGibbsDraws):
    """Imputation output of out-of-core multiple imputation: the model's moments per draw, and each imputed entry's
    summary (``cells``: ``row`` label, ``column`` index of the variable, ``mean`` and ``sd`` on the imputation scale)
    instead of ``(n, V)`` arrays."""

    cells: pd.DataFrame = None


@dataclass
class StreamedImputationResult(MultipleImputationResult):
    """:class:`~bayesvm.engines.imputation.multiple.MultipleImputationResult` of out-of-core rows (module docstring)."""

    def imputation_moments(self):
        draws = self.imputation
        return None, None, draws.mu.mean(axis=(0, 1)), draws.sigma.mean(axis=(0, 1))

    @property
    def imputed_cells(self) -> pd.DataFrame:
        return self.imputation.cells


def run_chain(imputation: StreamedImputation, passes, count: int, burn: int, thin: int, rng: np.random.Generator):
    """``count`` draws of the imputation chain on the partitions, ``thin`` steps apart after ``burn`` (as
    :func:`bayesvm.engines.imputation.normal_model.sample_imputations`): per draw, the partitions' handles to their
    missing entries (kept where they were drawn), and the model's marginal ``mu`` (count, V) and ``Sigma``
    (count, V, V).  One pass per step; each partition's generator is seeded from ``rng``."""
    y, V = imputation.y, imputation.V
    total = float(y.sum())
    UtU = np.array([[y.size, total], [total, float(y @ y)]])  # U = [1, y], from the sums: no n x 2 copy of y
    B, sigma = np.zeros((2, V)), np.eye(V)  # (the first step's draws given these are the in-memory start's noise)
    kept, mu, sig = [], [], []
    for step in range(burn + count * thin):
        seeds = [int(s) for s in rng.integers(2**63, size=len(passes.parts))]
        cells, sums = passes.carry(chain_step, seeds, B, sigma)
        Utz = sum(part[0] for part in sums)
        ztz = sum(part[1] for part in sums)

        def residual_squares(B, Utz=Utz, ztz=ztz):  # (z - U B)'(z - U B) from the sums
            cross = B.T @ Utz
            return ztz - cross - cross.T + B.T @ UtU @ B

        B, sigma = draw_model(UtU, Utz, residual_squares, sigma, imputation.mean_variance, imputation.df,
                              imputation.scale, rng)  # fmt: skip
        done = step - burn
        if done >= 0 and (done + 1) % thin == 0:
            kept.append(cells)
            m, s = marginal_moments(B, sigma, y)
            mu.append(m)
            sig.append(s)
    return kept, np.asarray(mu), np.asarray(sig)


def fit_streamed_mi(
    problem: VBProblem,
    imputation: StreamedImputation,
    passes,
    fit_completed,
    engine: str = "meanfield",
    imputations: int = 20,
    draws_per_imputation: int = 100,
    burn: int = 100,
    thin: int = 5,
    seed=None,
) -> StreamedImputationResult:
    """Multiple imputation on out-of-core rows (module docstring).

    ``passes``: :class:`bayesvm.outofcore.PartitionPasses` over :class:`ImputedPartition` rows; ``fit_completed(rows)``
    fits the model to one completed data set given its passes and returns the fit: streamed mean-field VB
    (``engine="meanfield"``, a Gaussian ``q``) or the streamed accurate fit (``"accurate"``, a mixture over nodes).  The
    chain runs ``burn + imputations * thin`` steps, as the in-memory one.
    """
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    kept, mu, sig = run_chain(imputation, passes, imputations, burn, thin, rng)
    fits, theta_d, theta_b, comps = [], [], [], []
    for cells in kept:
        completed = passes.derived(completed_rows, cells, imputation.columns, imputation.alpha, imputation.gamma)
        fit = fit_completed(completed)
        d, b, c = completed_data_draws(fit, engine, rng, draws_per_imputation)
        fits.append(fit)
        theta_d.append(d)
        theta_b.append(b)
        comps.append(c)
    pooled = pooling(rng, imputations * draws_per_imputation)
    per_cell = passes.sweep_states(cell_summaries, [tuple(k[p] for k in kept) for p in range(len(passes.parts))])
    labels, columns, means, sds = (np.concatenate([part[i] for part in per_cell]) for i in range(4))
    cells = pd.DataFrame({"row": labels, "column": columns.astype(np.int64), "mean": means, "sd": sds})
    return StreamedImputationResult(
        theta_d=pooled(theta_d), theta_b=pooled(theta_b),
        components=[pooled([c[k] for c in comps]) for k in range(len(problem.components))],
        log_posterior=None, elapsed=time.perf_counter() - start, tune=0, thin=1, seed=seed,
        imputation=StreamedImputedDraws(
            z_mean=None, z_var=None, mu=pooled([np.repeat(mu, draws_per_imputation, axis=0)]),
            sigma=pooled([np.repeat(sig, draws_per_imputation, axis=0)]), cells=cells,
        ),
        fits=fits, engine=engine,
    )  # fmt: skip
