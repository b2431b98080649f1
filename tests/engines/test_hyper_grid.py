"""The accurate fit's search and axes over the variance parameters (:mod:`bayesvm.engines.hyper_grid`)."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines import hyper_grid


def counted(function):
    calls = []

    def wrapped(phi):
        calls.append(float(np.atleast_1d(phi)[0]))
        return function(phi)

    return wrapped, calls


@pytest.mark.parametrize("mode", [-3.7, -0.2, 0.1, 0.6, 4.3])
def test_the_walk_brackets_the_mode_from_either_side(mode):
    log_post, calls = counted(lambda t: -0.5 * ((float(np.atleast_1d(t)[0]) - mode) / 0.3) ** 2)
    lo, hi = hyper_grid.bracket(log_post, 0.0)
    assert lo < mode < hi
    assert hi - lo == pytest.approx(2 * hyper_grid.BRACKET_STEP)
    # one fit per step of the walk, and one past the turn: no scan of the whole plausible range
    assert len(calls) <= abs(mode) / hyper_grid.BRACKET_STEP + 4


def test_the_walk_near_a_sharp_mode_takes_three_fits():
    log_post, calls = counted(lambda t: -0.5 * ((float(np.atleast_1d(t)[0]) - 0.1) / 0.005) ** 2)
    lo, hi = hyper_grid.bracket(log_post, 0.0)
    assert lo < 0.1 < hi and len(calls) == 3


def test_where_ep_failed_everywhere_the_walk_stops():
    log_post, calls = counted(lambda t: -np.inf)
    lo, hi = hyper_grid.bracket(log_post, 0.0)
    assert np.isfinite(lo) and np.isfinite(hi) and len(calls) <= 3


@pytest.mark.parametrize("scale", [0.002, 0.02, 0.4, 3.0])
def test_the_axes_follow_a_sharp_posterior_below_the_first_step(scale):
    """A posterior of many levels is narrower than the first finite-difference step: the axes must still be its own
    scale, or the lattice's nodes fall mostly outside it."""
    centre = np.array([0.3, -1.0])
    cov = np.array([[1.0, 0.6], [0.6, 2.0]]) * scale**2
    precision = np.linalg.inv(cov)

    def log_post(phi):
        r = np.asarray(phi) - centre
        return -0.5 * float(r @ precision @ r)

    axes = hyper_grid.hyper_axes(log_post, centre)
    np.testing.assert_allclose(axes @ axes.T, cov, rtol=1e-6, atol=1e-12 * scale**2)


def test_given_nodes_keep_their_weights_and_a_node_where_ep_failed_carries_none():
    given = hyper_grid.GivenNodes(
        nodes=np.array([[0.0], [0.5], [1.0]]), weights=np.array([0.5, 0.3, 0.2]), lattice=np.array([[0.0], [1.0], [2.0]]),
        axes=np.eye(1) * 0.5, step=1.0, design="lattice", center=np.zeros(1), components=("(1 | g)",),
    )  # fmt: skip
    seen = []
    grid = hyper_grid.given_grid(
        lambda phi: seen.append(float(phi[0])) or (-np.inf if phi[0] == 0.5 else -phi[0]), given
    )
    assert seen == [0.0, 0.5, 1.0]  # (heaviest first: each warm-starts from a converged neighbour)
    np.testing.assert_allclose(grid.weights, [0.5 / 0.7, 0.0, 0.2 / 0.7])
    assert list(grid.keep) == [True, False, True] and grid.tails_ok
    with pytest.raises(hyper_grid.AccurateFitError, match="none of the given nodes"):
        hyper_grid.given_grid(lambda phi: -np.inf, given)


def test_heaviest_nodes_hold_the_share_asked_for():
    from types import SimpleNamespace

    result = SimpleNamespace(
        weights=np.array([0.05, 0.6, 0.3, 0.05]), nodes=np.arange(4.0)[:, None], lattice=np.arange(4.0)[:, None],
        axes=np.eye(1), step=1.0, design="lattice", center=np.zeros(1),
        hyperparameters=SimpleNamespace(components=(SimpleNamespace(name="(1 | g)"),)),
    )  # fmt: skip
    chosen = hyper_grid.heaviest_nodes(result, mass=0.85)
    np.testing.assert_array_equal(chosen.nodes[:, 0], [1.0, 2.0])
    np.testing.assert_allclose(chosen.weights, [0.6 / 0.9, 0.3 / 0.9])
    assert chosen.components == ("(1 | g)",)
