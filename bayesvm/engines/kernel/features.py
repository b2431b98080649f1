"""A kernel model as a linear one: the whitened inducing-point features, for the linear engines.

With inducing locations ``Z`` (``m`` of them; the training inputs for ``inducing="all"``) and ``K_ZZ = L L'``, the
whitened parametrisation of Wenzel et al. (2017, section 4.2; :mod:`bayesvm.engines.kernel.vb`) writes the GP at the
training rows as ``f = A' v`` with ``A = L^-1 K_ZX`` and ``v ~ N(0, I_m)`` (the deterministic training conditional,
DTC, of Quinonero-Candela & Rasmussen 2005).  Given the kernel's hyperparameters, that is a linear model with the
``n x m`` design ``A'``, no intercept and the fixed prior precision 1 on every coefficient, so every linear engine
fits it unchanged: Gibbs (the exact posterior of ``v``), EM (the posterior mode: the L2-penalised hinge on the
features, ``sum 2 max(0, 1 - y_i a_i'v) + |v|^2 / 2``) and accurate VB (EP).  Prediction uses the exact test
conditional, ``f* | v ~ N(a*'v, k** - |a*|^2)``, as the VB engines do (section 4.4).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from ...kernels import Kernel
from ...model.problems import KernelProblem, VBProblem
from .vb import JITTER, ROW_CHUNK, jittered_cholesky


def kernel_jitter(kernel: Kernel, locations: np.ndarray) -> float:
    """The absolute jitter the kernel engines add to ``K_ZZ``: :data:`~bayesvm.engines.kernel.vb.JITTER` times
    the mean prior variance."""
    return float(JITTER * np.mean(kernel.diag(locations)))


def whitened_features(kernel: Kernel, locations: np.ndarray, X: np.ndarray, jitter: float) -> np.ndarray:
    """``A' = (L^-1 K_ZX)'`` (``n x m``), formed in row blocks of :data:`ROW_CHUNK`."""
    chol = jittered_cholesky(kernel.matrix(locations) + jitter * np.eye(len(locations)))
    out = np.empty((len(X), len(locations)))
    for start in range(0, len(X), ROW_CHUNK):
        rows = X[start : start + ROW_CHUNK]
        out[start : start + len(rows)] = linalg.solve_triangular(chol, kernel.matrix(locations, rows), lower=True).T
    return out


def feature_problem(problem: KernelProblem, kernel: Kernel, locations: np.ndarray, jitter: float) -> VBProblem:
    """The linear engines' problem for the kernel model with fixed hyperparameters (module docstring)."""
    D = whitened_features(kernel, locations, problem.X, jitter)
    return VBProblem(y=problem.y, D=D, fixed_precision=np.ones(D.shape[1]), components=(), weights=problem.weights)
