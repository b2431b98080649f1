"""The Polson-Scott (2011) hinge-loss augmentation shared by every engine.

``exp(-2 max(0, 1 - y f)) = int_0^inf (2 pi a)^(-1/2) exp(-(1 + a - y f)^2 / (2 a)) da``
(Luts & Ormerod 2014, section 2.3).  Under mean-field VB the optimal factor is
``q(a_i) = GIG(1/2, 1, chi_i)`` with ``chi_i = E_q[(1 - y_i f_i)^2]`` and
``E_q[1/a_i] = chi_i^(-1/2)``.
"""

from __future__ import annotations

import numpy as np

#: Floor on chi_i. chi_i -> 0 only when a point sits on the margin with a vanishing
#: predictive variance (separable data); flooring keeps E[1/a_i] finite.  The lower bound
#: below is exact for the floored q(a_i), and max(e_i, floor) is the constrained optimum,
#: so coordinate ascent stays monotone.
CHI_FLOOR = 1e-10


def log_bessel_k_half(x: np.ndarray) -> np.ndarray:
    """``log K_{1/2}(x) = log(pi / (2 x)) / 2 - x`` (closed form, no Bessel call)."""
    x = np.asarray(x, dtype=float)
    return 0.5 * np.log(np.pi / (2.0 * x)) - x


def update_chi(expected_sq_margin: np.ndarray) -> np.ndarray:
    """q(a_i) update: ``chi_i = max(E[(1 - y_i f_i)^2], CHI_FLOOR)`` (Alg. 1 step 3, Alg. 2 step 3)."""
    return np.maximum(expected_sq_margin, CHI_FLOOR)


def inverse_a_mean(chi: np.ndarray) -> np.ndarray:
    """``E_q[1 / a_i] = chi_i^(-1/2)`` for ``q(a_i) = GIG(1/2, 1, chi_i)``."""
    return 1.0 / np.sqrt(chi)


def weighted_predictor(y: np.ndarray, f: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """``g = omega f + (1 - omega) y``: the predictor whose unweighted hinge is the weighted one,
    ``max(0, 1 - y g) = omega max(0, 1 - y f)`` (``y^2 = 1``; :mod:`bayesvm.model.class_weights`).  ``weights=None``
    (every row 1) returns ``f``; ``f`` may hold draws in its leading axes."""
    if weights is None:
        return f
    return weights * f + (1.0 - weights) * y


def data_lower_bound(
    y: np.ndarray,
    mean_f: np.ndarray,
    expected_sq_margin: np.ndarray,
    chi: np.ndarray,
    weights: np.ndarray | None = None,
) -> float:
    """``E_q[log p(y, a | theta)] - E_q[log q(a)]`` summed over observations.

    With ``e_i = E_q[(1 - y_i f_i)^2]`` and ``q(a_i) = GIG(1/2, 1, chi_i)``, expanding
    ``log p(y_i, a_i | theta) = -log(2 pi)/2 - log(a_i)/2 - (1 - y_i f_i)^2/(2 a_i) - (1 - y_i f_i) - a_i/2``
    and ``log q(a_i) = -log(chi_i)/4 - log 2 - log K_{1/2}(sqrt chi_i) - log(a_i)/2 - (chi_i/a_i + a_i)/2``
    gives per observation
    ``-log(2 pi)/2 - 1 + y_i mu_f + log 2 + log(chi_i)/4 + log K_{1/2}(sqrt chi_i) + (chi_i - e_i) E[1/a_i] / 2``
    which, with the closed form of ``K_{1/2}``, is ``y_i mu_f - 1 - sqrt(chi_i) + (chi_i - e_i) / (2 sqrt(chi_i))``.
    At ``chi_i = e_i`` this is the paper's ``n log 2 - n - n log(2 pi)/2 + y'C mu + 1'log(chi)/4 + 1'log K_{1/2}(sqrt chi)``
    (Luts & Ormerod section 2.3); for a point mass q(theta) it is the log pseudo-likelihood ``-2 (1 - y f)_+``.

    With class weights ``omega_i`` (:mod:`bayesvm.model.class_weights`) row ``i`` is the unweighted row of
    ``g_i = omega_i f_i + (1 - omega_i) y_i`` with ``q(a_i) = GIG(1/2, 1, omega_i^2 chi_i)``: ``y_i E[g_i] - 1 =
    omega_i (y_i mu_f - 1)`` and ``E[(1 - y_i g_i)^2] = omega_i^2 e_i``, so its term is ``omega_i`` times the one above.
    """
    root = np.sqrt(chi)
    rows = y * mean_f - 1.0 - root + (chi - expected_sq_margin) / (2.0 * root)
    return float(np.sum(rows if weights is None else weights * rows))


def row_terms(y: np.ndarray, inverse_a: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's weight in ``q(theta)``'s precision and its linear term: ``w_i = E[1/a_i]`` and ``y_i (1 + w_i)``
    (Alg. 2 step 2), both times the row's class weight ``omega_i`` where there are weights
    (:mod:`bayesvm.model.class_weights`: ``omega_i^2 E[1/a_i]`` of the weighted row is ``omega_i e_i^{-1/2}``)."""
    rhs = y * (1.0 + inverse_a)
    if weights is None:
        return inverse_a, rhs
    return weights * inverse_a, weights * rhs
