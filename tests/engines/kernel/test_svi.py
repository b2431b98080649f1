"""Stochastic VI (Wenzel et al. 2017, Alg. 1 and section 4.5) against the full-batch solutions."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines.kernel.svi import fit_svi
from bayesvm.engines.kernel.vb import fit_inducing
from bayesvm.engines.linear.svi import fit_linear_svi
from bayesvm.engines.linear.vb import fit_vb
from bayesvm.engines.stochastic import StepSize, WindowRule, validate_learning_rate
from bayesvm.errors import BayesvmError
from bayesvm.kernels import RBF
from bayesvm.model.problems import KernelProblem

RNG = np.random.default_rng(5)
N = 600
X = RNG.normal(size=(N, 2))
Y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.4 * RNG.normal(size=N) > 0, 1.0, -1.0)


def test_kernel_svi_converges_to_the_full_batch_solution():
    problem = KernelProblem(X, Y, RBF(lengthscale=0.8, variance=4.0, learn=False))
    Z = X[:40]
    full = fit_inducing(problem, Z, tol=1e-12)
    svi = fit_svi(problem, Z, batch_size=100, tol=1e-6, max_iter=20000, seed=0)
    assert svi.converged and "moving window" in svi.stopping
    test = RNG.normal(size=(200, 2))
    mf, vf = full.predictor(test)
    ms, vs = svi.predictor(test)
    sd = np.sqrt(vf)
    assert np.max(np.abs(ms - mf) / sd) < 0.25, np.max(np.abs(ms - mf) / sd)
    assert np.max(np.abs(np.sqrt(vs) / sd - 1)) < 0.1
    # the monitor-set bound approaches the full-batch bound from below (within noise)
    assert abs(svi.monitor_bounds[-1] - full.lower_bound[-1]) < 0.01 * abs(full.lower_bound[-1])


def test_kernel_svi_learns_hyperparameters_towards_the_full_batch_values():
    problem = KernelProblem(X, Y, RBF(lengthscale=2.0, variance=1.0))
    Z = X[:40]
    full = fit_inducing(problem, Z)
    svi = fit_svi(problem, Z, batch_size=100, seed=0, max_iter=4000, tol=1e-5)
    start = problem.kernel.log_params()
    moved, target = svi.kernel.log_params() - start, full.kernel.log_params() - start
    assert np.all(np.sign(moved) == np.sign(target))


@pytest.mark.parametrize("penalty", ["fixed", "learn"])
def test_linear_svi_converges_to_batch_vb(penalty):
    import pandas as pd

    import bayesvm

    rng = np.random.default_rng(2)
    n = 3000
    Xl = rng.normal(size=(n, 3))
    df = pd.DataFrame(Xl, columns=["a", "b", "c"])
    df["y"] = (Xl @ [1.0, -1.0, 0.3] + 0.2 + 0.5 * rng.logistic(size=n) > 0).astype(int)
    pen = 0.5 if penalty == "fixed" else "learn"
    vb = bayesvm.bsvm("y ~ a + b + c", df, penalty=pen, vb="meanfield")
    svi = bayesvm.bsvm("y ~ a + b + c", df, penalty=pen, method="svi", seed=1, tol=1e-6)
    sd = np.sqrt(np.diag(vb.fixef_cov))
    assert np.max(np.abs(svi.fixef - vb.fixef) / sd) < 0.3
    assert np.max(np.abs(np.sqrt(np.diag(svi.fixef_cov)) / sd - 1)) < 0.1
    if penalty == "learn":
        assert svi.penalty_estimate == pytest.approx(vb.penalty_estimate, rel=0.1)
    assert "Stochastic VI" in str(svi.summary())


def test_linear_svi_engine_refuses_a_blocked_factor():
    """Random effects reach the linear SVI engine as dense columns (``bsvm`` moves them there; see
    ``tests/test_combinations.py``); a Schur-blocked factor would be silently ignored, so it is refused."""
    import bayesvm
    from bayesvm.engines.linear.svi import fit_linear_svi
    from bayesvm.fitting import build_design, build_model, parse_formula
    from bayesvm.priors import PriorSet

    toenail = bayesvm.datasets.load_toenail()
    design = build_design(parse_formula("outcome ~ visit + (1 | patientID)"), toenail)
    problem = build_model(design, "learn", PriorSet(), True).problem()
    assert problem.blocked is not None
    with pytest.raises(BayesvmError, match="dense q"):
        fit_linear_svi(problem)


def test_step_sizes_and_stopping_rule():
    assert validate_learning_rate("adaptive") == "adaptive"
    assert validate_learning_rate(0.3) == 0.3
    with pytest.raises(BayesvmError):
        validate_learning_rate(1.5)
    with pytest.raises(BayesvmError):
        validate_learning_rate("fast")
    rm = StepSize("robbins-monro", 10)
    rates = [rm(np.ones(2)) for _ in range(100)]
    assert rates[0] == 1.0 and np.all(np.diff(rates) < 0) and rates[-1] == pytest.approx(100**-0.51)
    adaptive = StepSize("adaptive", 5)
    noisy = [np.array([1.0, 0.0]) + RNG.normal(size=2) * 10 for _ in range(5)]
    adaptive.prime(noisy)
    assert adaptive(noisy[0]) < 0.5  # noisy gradients give small steps
    rule = WindowRule(tol=1e-3)
    assert not rule.done([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert rule.done([-100.0, -100.01, -100.0, -100.02, -100.01, -100.0]) and "moving window" in rule.message


def test_vb_reference_is_the_engine_used():
    """The linear SVI's fixed point is the batch VB optimum: one full-data step from it stays there."""
    import pandas as pd

    import bayesvm

    rng = np.random.default_rng(4)
    df = pd.DataFrame({"a": rng.normal(size=400)})
    df["y"] = (df.a + rng.logistic(size=400) > 0).astype(int)
    vb = bayesvm.bsvm("y ~ a", df, penalty=1.0)
    problem = vb.problem
    again = fit_vb(problem, tol=1e-12)
    step = fit_linear_svi(problem, batch_size=400, max_iter=200, tol=1e-12, learning_rate=1.0, seed=0)
    np.testing.assert_allclose(step.theta.mean_d, again.theta.mean_d, rtol=1e-6, atol=1e-8)
