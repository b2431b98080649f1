"""The stochastic engines' minibatches (bayesvm.engines.batches)."""

from __future__ import annotations

import numpy as np

from bayesvm.engines.batches import PartitionBatches, engine_batches, row_classes


def test_in_memory_minibatches_carry_each_rows_class_and_weight():
    """A row's response is signed by its class and sized by its class weight, and row_classes recovers both from a
    minibatch; without weights the responses pass as they are."""
    rng = np.random.default_rng(0)
    X = np.arange(40.0).reshape(20, 2)
    y = np.where(np.arange(20) % 3 == 0, 1.0, -1.0)
    weights = np.where(y > 0, 2.5, 0.6)
    batches = engine_batches(X, y, weights, 8, rng)
    rows, signed = batches.next()
    index = (rows[:, 0] / 2).astype(int)  # (row i holds 2i, 2i + 1)
    classes, omega = row_classes(signed, True)
    np.testing.assert_array_equal(classes, y[index])
    np.testing.assert_array_equal(omega, weights[index])
    rows, signed = engine_batches(X, y, None, 8, np.random.default_rng(0)).next()
    np.testing.assert_array_equal(row_classes(signed, False)[0], y[(rows[:, 0] / 2).astype(int)])
    assert row_classes(signed, False)[1] is None


def test_given_partitions_are_used_as_they_are():
    rng = np.random.default_rng(1)
    made = PartitionBatches(lambda k: (np.ones((5, 1)) * k, np.ones(5)), [5, 5], 5, rng)
    assert engine_batches(None, None, None, 5, rng, batches=lambda r: made) is made
