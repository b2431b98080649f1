"""The overlap certificate's Newton driver on its own: the score equation's weights where the classes overlap; None,
or weights a positivity test rejects, where a direction separates."""

import numpy as np

from bayesvm.checks.score_weights import score_weights


class DenseRows:
    def __init__(self, S):
        self.S = S

    def margins(self, coef):
        return self.S @ coef

    def scores(self, weights):
        return self.S.T @ weights

    def newton_step(self, curvature, gradient):
        return np.linalg.solve(self.S.T @ (curvature[:, None] * self.S), gradient)


def test_overlapping_rows_give_positive_weights_that_solve_the_score_equation():
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(200), rng.standard_normal((200, 2))])
    y = np.where(rng.random(200) < 1 / (1 + np.exp(-X @ [0.3, 1.0, -0.5])), 1.0, -1.0)
    S = y[:, None] * X
    weights = score_weights(DenseRows(S), *S.shape)
    assert weights is not None and weights.min() > 0
    np.testing.assert_allclose(S.T @ weights, 0.0, atol=1e-8 * weights.sum())


def test_separated_rows_give_none():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(100)
    y = np.where(x > 0.0, 1.0, -1.0)  # complete separation by x
    S = y[:, None] * np.column_stack([np.ones(100), x])
    assert score_weights(DenseRows(S), *S.shape) is None
    quasi = np.vstack([S, [[1.0, 0.0], [-1.0, 0.0]]])  # and two rows at x = 0, one of each class: quasi-complete
    weights = score_weights(DenseRows(quasi), *quasi.shape)  # Newton stalls with the isolated rows' weights at 0
    assert weights is None or weights.min() <= 1e-12  # which the caller's positivity test rejects


def test_a_step_that_cannot_be_solved_gives_none():
    S = np.array([[1.0], [-1.0], [0.5]])

    class Failing(DenseRows):
        def newton_step(self, curvature, gradient):
            return None

    assert score_weights(Failing(S), *S.shape) is None
