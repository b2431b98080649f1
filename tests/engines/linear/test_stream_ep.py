"""The accurate fit on out-of-core rows (:mod:`bayesvm.engines.linear.stream_ep`) against the in-memory one, on
partitions held in memory: each EP run is the in-memory run sweep for sweep, and the integrated fit gives the same
nodes, weights and moments."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines.augmentation import row_terms
from bayesvm.engines.linear.ep import fit_accurate, run_ep
from bayesvm.engines.linear.stream_ep import StreamedRows, fit_streamed_accurate
from bayesvm.engines.linear.vb import fit_vb, sorted_by_level
from bayesvm.linalg.dense import BlockedFactor
from bayesvm.model.problems import VarianceComponent, VBProblem
from bayesvm.priors import InverseGamma


def _problem(n: int, levels: int, seed: int = 0, k: int = 1) -> VBProblem:
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    g = rng.integers(0, levels, n)
    values = np.ones((n, 1)) if k == 1 else np.column_stack([np.ones(n), X[:, 1]])
    u = rng.normal(0.0, 1.0, (levels, k))
    eta = X @ [0.3, 1.0, -0.5] + np.sum(values * u[g], axis=1)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-eta)), 1.0, -1.0)
    blocked = BlockedFactor(codes=g, values=values, n_levels=levels)
    index = np.arange(k).reshape(1, k) if k > 1 else np.zeros((1, 1), dtype=int)
    prior = InverseGamma(0.01, 0.01) if k == 1 else None
    comp = (VarianceComponent("u", index, True, levels, prior=prior) if k == 1
            else VarianceComponent("u", index, True, levels, prior_df=k + 1.0, prior_scale=np.eye(k)))  # fmt: skip
    return VBProblem(y=y, D=X, fixed_precision=np.full(3, 1e-8), components=(comp,), blocked=blocked)


class ListPasses:
    """:class:`bayesvm.outofcore.PartitionPasses` over blocks of rows held in memory, each level's rows in one block
    (``by_level``) or cut across blocks."""

    def __init__(self, problem: VBProblem, count: int = 3, by_level: bool = True):
        codes = problem.blocked.codes
        if by_level:
            self.pieces = [np.flatnonzero(codes % count == j) for j in range(count)]
        else:
            self.pieces = np.array_split(np.arange(problem.n), count)
        self.problem = problem
        self.passes = 0

    def _rows(self, idx):
        blocked = self.problem.blocked
        return (self.problem.D[idx], blocked.codes[idx], blocked.values[idx]), self.problem.y[idx]

    def sweep(self, func, *args):
        self.passes += 1
        return [func(*self._rows(idx), *args) for idx in self.pieces]

    def carry(self, func, states, *args):
        self.passes += 1
        states = [None] * len(self.pieces) if states is None else states
        pairs = [func(*self._rows(idx), state, *args) for idx, state in zip(self.pieces, states)]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def sweep_states(self, func, states, *args):
        self.passes += 1
        return [func(*self._rows(idx), state, *args) for idx, state in zip(self.pieces, states)]


@pytest.mark.parametrize("by_level", [True, False])
def test_a_streamed_ep_run_is_the_in_memory_run_sweep_for_sweep(by_level):
    """The same sites from the same start, the same ``q(theta)`` and ``log Z_EP`` after the same sweeps, whether or
    not a level's rows span partitions (the sums are added level by level)."""
    _, problem = sorted_by_level(_problem(2000, 80))
    passes = ListPasses(problem, by_level=by_level)
    rows = StreamedRows(problem, passes, problem.n)
    warm = fit_vb(problem)
    precisions = [np.array([[1.0 / 0.8]])]
    streamed = rows.run(precisions, rows.start_sites(warm), tol=1e-5, damping=0.7)
    tau0, nu0 = row_terms(problem.y, 1.0 / np.sqrt(warm.chi), None)
    memory = run_ep(problem, precisions, tau0, nu0, tol=1e-5, damping=0.7)
    assert streamed.converged and memory.converged and streamed.n_iter == memory.n_iter
    np.testing.assert_allclose(streamed.theta.mean_d, memory.theta.mean_d, rtol=0, atol=1e-10)
    np.testing.assert_allclose(streamed.theta.mean_b, memory.theta.mean_b, rtol=0, atol=1e-10)
    np.testing.assert_allclose(streamed.theta.cov_d, memory.theta.cov_d, rtol=1e-9)
    assert streamed.log_evidence == pytest.approx(memory.log_evidence, rel=1e-11)
    tau = np.empty(problem.n)
    for idx, part in zip(passes.pieces, streamed.sites.parts):
        tau[idx] = part.tau
    np.testing.assert_allclose(tau, memory.tau, rtol=1e-9, atol=1e-12)  # (1/t_var - 1/v cancels for tiny sites)


def test_the_streamed_accurate_fit_gives_the_in_memory_nodes_weights_and_moments():
    """Each level's rows in one partition: the importance-sampled evidence adds the partitions' level integrals, so
    nodes, weights (importance-sampled) and the mixture's moments are the in-memory fit's."""
    problem = _problem(1500, 60, seed=3)
    memory = fit_accurate(problem)
    streamed = fit_streamed_accurate(problem, ListPasses(sorted_by_level(problem)[1]), problem.n)
    assert memory.node_weights.method == streamed.node_weights.method == "importance"
    assert streamed.converged and streamed.nodes.shape == memory.nodes.shape
    np.testing.assert_allclose(streamed.nodes, memory.nodes, atol=1e-6)
    np.testing.assert_allclose(streamed.weights, memory.weights, atol=1e-6)
    mean_s, cov_s = streamed.fixed_moments(3)
    mean_m, cov_m = memory.fixed_moments(3)
    np.testing.assert_allclose(mean_s, mean_m, atol=1e-6)
    np.testing.assert_allclose(cov_s, cov_m, rtol=1e-5, atol=1e-8)  # (EP stops at EP_TOL: off-diagonals agree so far)
    assert streamed.weights @ streamed.variances[:, 0] == pytest.approx(memory.weights @ memory.variances[:, 0], 1e-6)
    assert streamed.chi.size == 0  # (no per-row quantity is gathered out of core)


def test_a_correlated_term_out_of_core_keeps_eps_weights_and_says_why():
    problem = _problem(800, 30, seed=4, k=2)
    streamed = fit_streamed_accurate(problem, ListPasses(sorted_by_level(problem)[1]), problem.n)
    assert streamed.node_weights.method == "EP"
    assert "out of core" in streamed.node_weights.reason and "a correlated term" in streamed.node_weights.reason
    memory = fit_accurate(problem, importance_weights=False)
    np.testing.assert_allclose(streamed.fixed_moments(3)[0], memory.fixed_moments(3)[0], atol=1e-5)


def test_several_nodes_in_one_pass_are_each_nodes_own_run():
    """``run_many`` sweeps every node in the same pass; each node stops on its own and ends where its own run does."""
    _, problem = sorted_by_level(_problem(1200, 40, seed=5))
    passes = ListPasses(problem)
    rows = StreamedRows(problem, passes, problem.n)
    start = rows.start_sites(fit_vb(problem))
    precisions = [[np.array([[1.0 / v]])] for v in (0.2, 1.0, 6.0)]
    before = passes.passes
    together = rows.run_many(precisions, [start] * 3, tol=1e-5)
    batched_passes = passes.passes - before
    alone = [rows.run(p, start, tol=1e-5) for p in precisions]
    assert batched_passes == max(state.n_iter for state in together) + 1  # (the last pass: the evidence terms)
    assert len({state.n_iter for state in alone}) > 1  # (the nodes stop at different sweeps)
    for a, b in zip(together, alone):
        assert a.converged and a.n_iter == b.n_iter
        np.testing.assert_allclose(a.theta.mean_d, b.theta.mean_d, rtol=0, atol=1e-12)
        assert a.log_evidence == pytest.approx(b.log_evidence, rel=1e-12)


def test_the_streamed_fit_fits_independent_nodes_together(monkeypatch):
    """The lattice, the Hessian's stencil and each wave of the extension are fitted in shared passes: about half the
    passes over the data of fitting one node at a time (each then extrapolated from the nodes fitted just before it),
    and the same nodes and weights."""
    problem = _problem(1500, 60, seed=3)
    counts, results = [], []
    for batched in (True, False):
        monkeypatch.setattr(StreamedRows, "batched", batched)
        passes = ListPasses(sorted_by_level(problem)[1])
        results.append(fit_streamed_accurate(problem, passes, problem.n))
        counts.append(passes.passes)
    assert counts[0] < 0.6 * counts[1]  # (138 and 270 here)
    np.testing.assert_allclose(results[0].nodes, results[1].nodes, atol=1e-6)
    np.testing.assert_allclose(results[0].weights, results[1].weights, atol=1e-6)
