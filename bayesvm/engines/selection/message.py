"""The rows' message to the selection VB engines' factors: one copy for their batch sweeps and for SVI.

Given ``w_i = E[1/a_i]`` (:mod:`bayesvm.engines.augmentation`), the expected augmented log-likelihood is
``theta' r - theta' G theta / 2`` plus terms free of ``theta``, with ``G = X' W X`` and ``r = X' Y (1 + w)``
(Luts & Ormerod 2014, Alg. 3 steps 2-3).  So every factor of a selection VB engine other than ``q(a)`` sees the rows
only through the message ``(G, r)``, and each engine's sweep splits into

* ``update(G, r, *factors) -> Factors``: every coordinate update but ``q(a)``, given the message; the returned
  record carries ``rest`` (the next state after ``chi``) and ``prior_bound`` (the lower bound without the data
  term);
* ``row_moments(factors, X, y) -> (E f, E (1 - y f)^2)`` at any rows: what ``q(a)`` and the data term need.

:class:`MessageSweep` composes them into the batch sweep (message from every row, the updates, then ``q(a)`` and
:func:`~bayesvm.engines.augmentation.data_lower_bound`); :mod:`bayesvm.engines.selection.svi` averages the message
of minibatches instead.
"""

from __future__ import annotations

import numpy as np

from ...linalg.row_sums import weighted_gram
from ..augmentation import data_lower_bound, inverse_a_mean, row_terms, update_chi


def minibatch_message(
    X: np.ndarray, y: np.ndarray, w: np.ndarray, scale: float, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``scale (X' W X, X' Y (1 + w))`` for the rows ``X`` (dense): with ``scale = n / s`` an unbiased estimate of
    the full message from ``s`` rows drawn without replacement (``weights``: the rows' class weights,
    :func:`~bayesvm.engines.augmentation.row_terms`)."""
    w, rhs = row_terms(y, w, weights)
    return scale * weighted_gram(X, w), scale * (X.T @ rhs)


class MessageSweep:
    """The batch sweep of a selection VB coordinate object with ``p`` (its problem), ``update`` and ``row_moments``.

    The record ``update`` returns gets ``state = (chi, *rest)`` and ``bound = data term + prior_bound``.
    """

    def sweep(self, chi: np.ndarray, *rest, **options):
        p = self.p
        w, rhs = row_terms(p.y, inverse_a_mean(chi), p.weights)  # (class weights: each row's terms times omega_i)
        factors = self.update(p.weighted_gram(w), p.X.T @ rhs, *rest, **options)
        f_mean, expected_sq = self.row_moments(factors, p.X, p.y)
        chi = update_chi(expected_sq)
        factors.state = (chi, *factors.rest)
        factors.bound = data_lower_bound(p.y, f_mean, expected_sq, chi, p.weights) + factors.prior_bound
        return factors
