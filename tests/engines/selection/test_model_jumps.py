"""Model jumps (:mod:`bayesvm.engines.selection.model_jumps`): the independence proposals from the VB fit keep the
exact model probabilities, and they take a chain out of a far worse model in one accepted step."""

from __future__ import annotations

import numpy as np
import pytest

from bayesvm.engines.selection import model_jumps
from bayesvm.engines.selection.gibbs import sample_selection
from bayesvm.engines.selection.gibbs_steps import LaplaceZeroStep, SpikeSlabStep
from bayesvm.engines.selection.model_jumps import JumpReference, ModelJumps, jump_reference
from bayesvm.priors import InverseGamma, LaplaceZero, SpikeSlab

from ..model_enumeration import sampled_model_probabilities
from .test_moves import _correlated, _counting_moves, _laplace_zero_exact, _spike_slab_exact

pytestmark = pytest.mark.once  # version-independent numerical checks (pyproject.toml markers)

ONLY_JUMPS = dict(swaps=False, pairs=False, lines=False, shears=False)  # the papers' samplers plus the jumps


@pytest.mark.parametrize("prior_name", ["spike-slab", "laplace-zero"])
def test_sampler_with_jumps_matches_enumeration(monkeypatch, prior_name):
    """The papers' single-site samplers with the jumps added: the model probabilities equal exact enumeration, and
    the jumps were accepted often enough to matter."""
    if prior_name == "spike-slab":
        prior = SpikeSlab(pi=0.4, nu=1.5)
        problem = _correlated(3, prior)
        exact, p = _spike_slab_exact(problem, prior), 3
    else:
        prior = LaplaceZero(rho=0.4, variance=InverseGamma(2.0, 1.0))
        problem = _correlated(2, prior, n=20, seed=6)
        exact, p = _laplace_zero_exact(problem, prior), 2
    made = _counting_moves(monkeypatch, ModelJumps)
    result = sample_selection(problem, draws=5000, tune=300, chains=2, seed=3, progress=False, **ONLY_JUMPS)
    sampled = sampled_model_probabilities(result, p)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert np.all(np.abs(sampled - exact) < 4 * se + 0.01), (np.round(sampled, 3), np.round(exact, 3))
    accepted = sum(m.accepted for m in made) / sum(m.proposed for m in made)
    assert len(made) == 2 and accepted > 0.05, accepted


def test_a_jump_without_the_proposal_density_is_caught(monkeypatch):
    """The same check fails when the acceptance ratio leaves out the proposal's densities (Metropolis instead of
    Metropolis-Hastings): the test has the power to see a wrong jump."""
    prior = SpikeSlab(pi=0.4, nu=1.5)
    problem = _correlated(3, prior)
    exact = _spike_slab_exact(problem, prior)
    monkeypatch.setattr(ModelJumps, "_log_proposal", lambda self, *args: 0.0)
    result = sample_selection(problem, draws=5000, tune=300, chains=2, seed=3, progress=False, **ONLY_JUMPS)
    sampled = sampled_model_probabilities(result, 3)
    se = np.sqrt(exact * (1 - exact) / 2000)
    assert not np.all(np.abs(sampled - exact) < 4 * se + 0.01)


@pytest.mark.parametrize("step_type", [SpikeSlabStep, LaplaceZeroStep], ids=["spike-slab", "laplace-zero"])
def test_a_chain_with_every_slope_out_jumps_to_the_vb_model(step_type):
    """Three slopes that the data need, a state with all of them out: the first accepted jump puts them in, with the
    indicators and values of the step object set to the proposal's."""
    rng = np.random.default_rng(0)
    n = 300
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 3))])
    y = np.where(X[:, 1:] @ np.array([1.5, -1.0, 1.0]) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    prior = SpikeSlab(pi=0.2, nu=2.0) if step_type is SpikeSlabStep else LaplaceZero(rho=0.2)
    from bayesvm.model.problems import SelectionProblem

    problem = SelectionProblem(y=y, X=X, selected=np.arange(1, 4), fixed_precision=np.array([1e-4, 0, 0, 0]),
                               prior=prior, prior_scale=np.ones(3))  # fmt: skip
    reference = jump_reference(problem)
    assert isinstance(reference, JumpReference) and np.all(reference.include == 1 - model_jumps.JUMP_FLOOR)
    state = step_type(problem, rng)
    state.gamma[:] = 0
    coef = np.zeros(4)
    jumper = ModelJumps(y, X, problem.selected, problem.fixed_precision[problem.unselected], reference)
    for _ in range(50):
        coef = jumper.run(state, coef, rng)
        if jumper.accepted:
            break
    assert jumper.accepted == 1 and state.gamma.tolist() == [1, 1, 1]
    assert np.all(np.sign(coef[1:]) == [1, -1, 1])


def test_no_reference_without_indicators():
    """The lasso has no indicators to jump between, nor a Laplace-zero prior with rho = 1."""
    from bayesvm.priors import Lasso

    problem = _correlated(2, Lasso())
    assert jump_reference(problem) is None
    assert jump_reference(_correlated(2, LaplaceZero(rho=1.0))) is None


def test_the_proposal_density_is_students_t():
    """The proposal's t density, written out for speed, is scipy's."""
    from scipy import stats

    rng = np.random.default_rng(1)
    x, loc, scale = rng.normal(size=5), rng.normal(size=5), rng.uniform(0.5, 2.0, 5)
    expected = stats.t.logpdf(x, model_jumps.JUMP_DF, loc, scale).sum()
    assert model_jumps._log_t(x, loc, scale) == pytest.approx(expected, rel=1e-12)


def test_no_reference_for_many_slopes(monkeypatch):
    """Beyond JUMP_MAX_SLOPES slopes the whole-model proposal is hopeless: no VB fit, no jumps."""
    monkeypatch.setattr(model_jumps, "JUMP_MAX_SLOPES", 2)
    assert jump_reference(_correlated(3, SpikeSlab(pi=0.4, nu=1.5))) is None
    assert jump_reference(_correlated(2, SpikeSlab(pi=0.4, nu=1.5))) is not None
