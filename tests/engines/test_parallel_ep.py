"""Parallel EP's sweep driver (:func:`bayesvm.engines.parallel_ep.parallel_sweeps`) on toy sweeps with known
behaviour: a contraction to a fixed point, a divergence, and a run cut short."""

import numpy as np

from bayesvm.engines.parallel_ep import parallel_sweeps


def _contraction(target, rate=0.5):
    def sweep(tau, nu):  # the predictor means formed from (tau, nu), then sites a step closer to the fixed point
        return nu / tau, tau, nu + rate * (target * tau - nu)

    return sweep


def test_the_sweeps_stop_when_no_predictor_mean_moves_more_than_tol_relative():
    tau, nu = np.ones(3), np.zeros(3)
    tau, nu, sweeps, converged = parallel_sweeps(_contraction(np.array([1.0, -2.0, 4.0])), tau, nu, 500, 1e-8)
    assert converged and 20 < sweeps < 60
    np.testing.assert_allclose(nu / tau, [1.0, -2.0, 4.0], rtol=1e-7)
    # the rule is relative to 1 + max |E f|: the same run on means 1,000 times larger stops as early in relative terms
    _, _, big, _ = parallel_sweeps(_contraction(np.array([1e3, -2e3, 4e3])), np.ones(3), np.zeros(3), 500, 1e-8)
    assert abs(big - sweeps) <= 2


def test_a_divergent_sweep_stops_the_run_with_the_sites_it_had_and_max_iter_cuts_it_short():
    calls = []

    def diverging(tau, nu):
        calls.append(nu.copy())
        return None if len(calls) == 3 else (nu, tau, nu + 1.0)

    tau, nu, sweeps, converged = parallel_sweeps(diverging, np.ones(2), np.zeros(2), 100, 1e-8)
    assert not converged and sweeps == 3 and np.array_equal(nu, calls[-1])
    tau, nu, sweeps, converged = parallel_sweeps(_contraction(np.array([5.0])), np.ones(1), np.zeros(1), 4, 1e-12)
    assert not converged and sweeps == 4
