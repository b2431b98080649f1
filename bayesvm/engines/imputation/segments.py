"""Multiple imputation inside the selection sampler's chain (``missing="impute"`` with a selection prior and
``method="gibbs"``; Luts & Ormerod 2014, section 3.3).

The chain runs in segments (:func:`bayesvm.engines.imputation.joint_model.storage_schedule`): each starts from a new
completed data set, drawn ``MI_THIN`` steps of the imputation model's own chain after the last one (``MI_BURN`` before
the first); the first ``MI_SETTLE`` iterations of a segment are not stored, so the coefficients' chain forgets the
previous completed data set.  The imputation model sees the class labels but not the coefficients (the cut posterior
of :mod:`bayesvm.engines.imputation.multiple`).

:class:`ImputedSegments` is what the sampler is given (``sample_selection(..., imputation=ImputedSegments(problem))``):
it lays out the stored iterations, starts each chain's imputation (:class:`ChainImputation`), keeps each chain's
imputation draws beside its coefficients and pools them into the result.  The sampler asks it; it does not know the
imputation model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model.problems import ImputationProblem
from ..selection.gibbs import SelectionGibbsResult
from .joint_model import (
    MI_BURN,
    MI_THIN,
    ImputedGibbsDraws,
    ImputedGibbsResult,
    imputation_schedule,
    storage_schedule,
)
from .normal_model import imputation_step, marginal_moments, missing_patterns, start_state


@dataclass
class ImputedSelectionGibbsResult(SelectionGibbsResult, ImputedGibbsResult):
    """Selection Gibbs with multiple imputation inside the chain (``missing="impute"``, ``imputation="mi"``)."""


class ChainImputation:
    """One chain's imputation state: the imputation model's chain, and the completed data set in use."""

    def __init__(self, problem: ImputationProblem, y: np.ndarray, total: int, thin: int, rng: np.random.Generator):
        self.problem, self.y, self.rng = problem, y, rng
        self.new_imputation = imputation_schedule(total, thin)
        self.patterns = missing_patterns(problem.missing)
        self.state = start_state(problem, rng)
        self.mu, self.sigma = np.zeros(problem.V), np.eye(problem.V)

    def design_at(self, step: int) -> np.ndarray | None:
        """The design of a new completed data set where iteration ``step`` starts a segment (the imputation chain moved
        on by ``MI_BURN`` steps before the first, ``MI_THIN`` before each later one), else None."""
        if not self.new_imputation[step]:
            return None
        for _ in range(MI_BURN if step == 0 else MI_THIN):
            imputation_step(self.state, self.problem, self.y, self.patterns, self.rng)
        self.mu, self.sigma = marginal_moments(self.state.B, self.state.sigma, self.y)
        return self.problem.design(self.state.z)

    def record(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(mu, Sigma, z)`` of the completed data set in use (the imputation model's moments given the classes)."""
        return self.mu, self.sigma, self.state.z


@dataclass(frozen=True)
class ImputedSegments:
    """Multiple imputation for the selection sampler (module docstring); ``problem`` is the ``imputation="mi"``
    problem on the same rows and columns as the selection problem's design."""

    problem: ImputationProblem

    #: the result type of a chain with imputation segments
    result_type = ImputedSelectionGibbsResult

    @property
    def columns(self) -> np.ndarray:
        """The imputed columns (they change with each completed data set)."""
        return self.problem.columns

    def storage(self, tune: int, draws: int, thin: int) -> np.ndarray:
        """Per iteration, the index of the stored draw or -1 (tuning, thinning, settling after a new data set)."""
        return storage_schedule(tune, draws, thin, True)

    def start(self, y: np.ndarray, total: int, thin: int, rng: np.random.Generator) -> ChainImputation:
        return ChainImputation(self.problem, y, total, thin, rng)

    def chain_arrays(self, draws: int) -> dict:
        """A chain's storage for its imputation draws: ``mu``, ``Sigma`` per kept draw, sums of ``z`` and ``z^2``."""
        V = self.problem.V
        return {
            "mu": np.empty((draws, V)),
            "sigma": np.empty((draws, V, V)),
            "z_sum": np.zeros(self.problem.z.shape),
            "z_sq": np.zeros(self.problem.z.shape),
        }

    @staticmethod
    def keep(out: dict, i: int, record: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Store kept draw ``i``'s ``(mu, Sigma, z)`` in a chain's arrays."""
        mu, sigma, z = record
        out["mu"][i], out["sigma"][i] = mu, sigma
        out["z_sum"] += z
        out["z_sq"] += z**2

    def pooled(self, runs: list[dict]) -> dict:
        """The result's imputation fields from every chain's arrays: ``z``'s posterior mean and variance (0 where
        observed) and the draws of ``mu`` and ``Sigma``."""
        kept = sum(r["mu"].shape[0] for r in runs)
        z_mean = sum(r["z_sum"] for r in runs) / kept
        z_var = np.maximum(sum(r["z_sq"] for r in runs) / kept - z_mean**2, 0.0) * kept / max(kept - 1, 1)
        z_var[~self.problem.missing] = 0.0
        mu, sigma = np.stack([r["mu"] for r in runs]), np.stack([r["sigma"] for r in runs])
        return {"imputation": ImputedGibbsDraws(z_mean=z_mean, z_var=z_var, mu=mu, sigma=sigma),
                "imputation_mode": "mi"}  # fmt: skip
