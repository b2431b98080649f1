"""A level's hinge pseudo-likelihood integrated over its random effect, and exact draws of the effect."""

import numpy as np
import pytest
from scipy import stats
from scipy.special import log_ndtr, logsumexp

from bayesvm.engines import hinge_levels
from bayesvm.engines.hinge_levels import LevelLayout, draw_levels, pieces, truncated_normal
from bayesvm.engines.linear import compiled_rows


def _levels(seed=0, n=40, J=6):
    rng = np.random.default_rng(seed)
    y = rng.choice([-1.0, 1.0], n)
    v = rng.normal(1.0, 0.5, n)
    v[:3] = 0.0  # rows the effect does not touch
    codes = rng.integers(0, J, n)
    eta = rng.normal(0.0, 1.0, n)
    return y, v, codes, J, eta


def _brute_force(y, v, codes, J, eta, sigma2, u=None):
    """``log I_j`` by quadrature over a fine grid of ``u``, and the grid's normalised conditional density per level."""
    u = np.linspace(-40, 40, 160001) if u is None else u
    out, densities = [], []
    for j in range(J):
        rows = (codes == j) & (v != 0)
        hinge = np.maximum(0.0, 1.0 - y[rows, None] * (eta[rows, None] + v[rows, None] * u[None, :])).sum(axis=0)
        log_integrand = -2.0 * hinge + stats.norm.logpdf(u, 0.0, np.sqrt(sigma2))
        out.append(logsumexp(log_integrand) + np.log(u[1] - u[0]))
        densities.append(np.exp(log_integrand - logsumexp(log_integrand)))
    return np.array(out), u, densities


@pytest.mark.parametrize("sigma2", [1e-4, 0.3, 25.0])
def test_closed_form_matches_quadrature(sigma2):
    y, v, codes, J, eta = _levels()
    part = pieces(LevelLayout(y, v, codes, J), eta[None, :])
    exact, _, _ = _brute_force(y, v, codes, J, eta, sigma2)
    np.testing.assert_allclose(part.log_integrals(np.array([sigma2]))[0], exact, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("delta", [-2.5, 0.3])
def test_shifted_pieces_are_the_integrals_at_the_moved_predictor(delta):
    """Moving the effects' prior mean by ``delta`` is moving the rest of the predictor by ``delta`` times the values:
    the shifted intervals give those integrals (against quadrature) and their draws are ``u``, not ``u + delta``."""
    y, v, codes, J, eta = _levels(seed=2)
    layout = LevelLayout(y, v, codes, J)
    shifted = pieces(layout, eta[None, :]).shifted(delta)
    exact, u, densities = _brute_force(y, v, codes, J, eta + delta * v, 0.4, u=np.linspace(-20, 20, 80001))
    np.testing.assert_allclose(shifted.log_integrals(np.array([0.4]))[0], exact, rtol=1e-6, atol=1e-6)
    assert shifted.log_integral_sum(0.4) == pytest.approx(shifted.log_integrals(np.array([0.4])).sum(), rel=1e-10)
    draws = np.array([draw_levels(shifted, 0.4, np.random.default_rng(seed)) for seed in range(4000)])
    exact_means = np.array([np.sum(u * density) for density in densities])
    np.testing.assert_allclose(draws.mean(axis=0), exact_means, atol=4 * np.sqrt(0.4 / 4000))


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("sigma2", [1e-8, 1e-3, 0.7, 40.0, 1e6])
def test_compiled_sum_matches_numpy(sigma2, monkeypatch):
    y, v, codes, J, eta = _levels(seed=1, n=200, J=30)
    eta[:20] *= 50.0  # kinks far out in both tails
    part = pieces(LevelLayout(y, v, codes, J), eta[None, :])
    compiled = part.log_integral_sum(sigma2)
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    assert part.log_integral_sum(sigma2) == pytest.approx(compiled, rel=1e-11, abs=1e-9)
    # the intervals built in one compiled pass: the same terms, shifted too
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "1")
    built = hinge_levels.level_pieces(LevelLayout(y, v, codes, J), eta)
    for delta in (0.0, 0.3):
        np.testing.assert_allclose(
            built.shifted(delta).log_integrals(np.array([sigma2])), part.shifted(delta).log_integrals(np.array([sigma2])),
            rtol=1e-11, atol=1e-9,
        )  # fmt: skip


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("sigma2", [1e-8, 1e-3, 0.7, 40.0, 1e6])
def test_large_levels_summed_from_their_mode_match_numpy(sigma2, monkeypatch):
    """Levels of hundreds of rows (slopes of both signs, kinks far out in both tails) are summed from the integrand's
    mode outwards until the rest is below the last bit (:func:`bayesvm.engines.hinge_levels._windowed_log_integral`):
    the same sum as every interval's, which the numpy path adds."""
    y, v, codes, J, eta = _levels(seed=3, n=2400, J=5)
    v[5:40] *= -1.0
    eta[:60] *= 50.0
    assert np.bincount(codes).min() > hinge_levels.WINDOWED_FROM
    part = pieces(LevelLayout(y, v, codes, J), eta[None, :])
    compiled = part.log_integral_sum(sigma2)
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    assert part.log_integral_sum(sigma2) == pytest.approx(compiled, rel=1e-11, abs=1e-9)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
@pytest.mark.parametrize("sigma2", [1e-8, 1e-3, 0.7, 40.0, 1e6])
def test_large_levels_integrated_from_their_mode_unsorted_match_numpy(sigma2):
    """Per draw, levels of more than ``INSERTION_ROWS`` rows are split at their mode and only the kinks crossed are
    ordered (:func:`bayesvm.engines.hinge_levels._log_integral_from_mode`): the same ``sum_j log I_j`` as the numpy
    path's every interval, with tied kinks (a rounded predictor), slopes of one sign, kinks far out in the tails and a
    level whose kinks all coincide."""
    rng = np.random.default_rng(7)
    for case in range(8):
        n, J = int(rng.integers(300, 2500)), int(rng.integers(1, 4))
        y, v = rng.choice([-1.0, 1.0], n), rng.normal(1.0, 0.5, n)
        v = np.abs(v) if case % 4 == 0 else v * (rng.choice([-1.0, 1.0], n) if case % 4 == 1 else 1.0)
        v[:3] = 0.0
        codes = rng.integers(0, J, n)
        eta = np.round(rng.normal(0.0, 1.0, (3, n)), 1) if case % 2 else rng.normal(0.0, 1.0, (3, n))
        eta[:, :30] *= 50.0 if case == 3 else 1.0
        eta[:, codes == 0] = 0.3 if case == 5 else eta[:, codes == 0]
        layout = LevelLayout(y, v, codes, J)
        variances = np.full(3, sigma2)
        got = hinge_levels.draws_log_integral_sums(layout.y, eta, layout.slope, layout.rows, variances)
        expected = pieces(layout, eta).log_integrals(variances).sum(axis=1)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-10)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_the_mode_split_puts_the_mode_between_its_two_sides():
    """:func:`bayesvm.engines.hinge_levels._mode_split` leaves the kinks below the mode first: the exponent rises just
    above the largest of them and falls just below the smallest of the rest, and ``top`` is the mode's interval of
    the sorted kinks (the first whose right end has ``g' <= 0``); the heaps then give each side in order."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        m = int(rng.integers(1, 400))
        kinks = np.round(rng.normal(0.0, rng.choice([0.01, 1.0, 30.0]), m), int(rng.integers(0, 4)))
        slopes = rng.normal(0.0, 1.0, m)
        slopes[slopes == 0.0] = 1.0
        inverse = float(10.0 ** rng.uniform(-4, 4))

        def right_slope(p, kinks=kinks, slopes=slopes, inverse=inverse):  # g'(p+)
            positive, negative = slopes[(kinks > p) & (slopes > 0)], slopes[(kinks <= p) & (slopes < 0)]
            return 2.0 * (positive.sum() + negative.sum()) - p * inverse

        order = np.argsort(kinks, kind="stable")
        expected = next((q for q in range(m) if right_slope(kinks[order][q]) <= 0.0), m)
        work_kinks, work_slopes = kinks.copy(), slopes.copy()
        top = hinge_levels._mode_split(work_kinks, work_slopes, m, inverse)
        assert top == expected
        assert sorted(zip(work_kinks, work_slopes)) == sorted(zip(kinks, slopes))  # a permutation, pairs kept
        below, above = work_kinks[:top].copy(), work_kinks[top:].copy()
        assert top == 0 or right_slope(below.max()) > 0.0
        assert top == m or right_slope(above.min()) <= 0.0
        hinge_levels._heapify(work_kinks, work_slopes, 0, top, -1.0)
        hinge_levels._heapify(work_kinks, work_slopes, top, m - top, 1.0)
        popped_below = [hinge_levels._heap_pop(work_kinks, work_slopes, 0, size, -1.0)[0] for size in range(top, 0, -1)]
        popped_above = [
            hinge_levels._heap_pop(work_kinks, work_slopes, top, size, 1.0)[0] for size in range(m - top, 0, -1)
        ]
        assert popped_below == sorted(below, reverse=True) and popped_above == sorted(above)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_compiled_log_ndtr_matches_scipy():
    x = np.concatenate([np.linspace(-80, 40, 6001), [-np.inf, np.inf, 0.0, -30.0, -29.999, -30.001]])
    got = np.array([hinge_levels.log_ndtr_compiled(value) for value in x])
    expected = log_ndtr(x)
    finite = np.isfinite(expected) & (expected != 0)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-11)
    assert got[0] < -3000 and np.isneginf(got[-6]) and got[-5] == 0.0


def test_draws_follow_the_exact_conditional():
    """Draws of each level's effect given ``sigma^2`` against the quadrature CDF (Kolmogorov-Smirnov distance)."""
    y, v, codes, J, eta = _levels(seed=2)
    sigma2 = 2.0
    part = pieces(LevelLayout(y, v, codes, J), eta[None, :])
    rng = np.random.default_rng(0)
    draws = np.array([draw_levels(part, sigma2, rng) for _ in range(4000)])
    _, u, densities = _brute_force(y, v, codes, J, eta, sigma2, u=np.linspace(-12, 12, 24001))
    for j in range(J):
        cdf = np.cumsum(densities[j])
        model = np.interp(np.sort(draws[:, j]), u, cdf)
        empirical = np.arange(1, draws.shape[0] + 1) / draws.shape[0]
        assert np.max(np.abs(model - empirical)) < 1.95 / np.sqrt(draws.shape[0])  # the 0.1% KS critical value, each


def test_truncated_normal_in_far_tails():
    rng = np.random.default_rng(4)
    u = rng.random(20000)
    # an interval 40 standard deviations out on either side: inversion in log space keeps every draw inside it
    for lo, hi in ((40.0, 41.0), (-41.0, -40.0), (-np.inf, -39.0), (39.0, np.inf)):
        x = truncated_normal(np.zeros(u.size), 1.0, np.full(u.size, lo), np.full(u.size, hi), u)
        assert np.all((x >= lo) & (x <= hi)) and np.all(np.isfinite(x))
    x = truncated_normal(np.zeros(u.size), 1.0, np.full(u.size, 0.5), np.full(u.size, 2.0), u)
    expected = stats.truncnorm(0.5, 2.0)
    assert stats.kstest(x, expected.cdf).pvalue > 0.001
    # past 40 sd the truncated normal is nearly exponential with rate ``lo``: its mean is ``lo + 1/lo``
    x = truncated_normal(np.zeros(u.size), 1.0, np.full(u.size, 50.0), np.full(u.size, np.inf), u)
    assert np.mean(x) == pytest.approx(50.0 + 1 / 50.0, abs=1e-3)


@pytest.mark.parametrize("numba_switch", ["1", "0"])
@pytest.mark.parametrize("sigma2", [1e-8, 0.05, 2.0, 1e6])
@pytest.mark.parametrize("levels", [40, 6])
def test_level_effects_are_the_draws_of_the_intervals(levels, sigma2, numba_switch, monkeypatch):
    """:func:`draw_level_effects` (one compiled pass, or numpy without numba) draws what :func:`draw_levels` draws
    on :func:`pieces` of the same predictor, from the same random numbers: kinks far out in both tails, levels with
    no active rows, unequal level sizes, and levels of about 50 rows (sorted by ``argsort``, not by insertion)."""
    monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, numba_switch)
    y, v, codes, J, eta = _levels(seed=3, n=300, J=levels)
    eta[:30] *= 60.0
    codes[codes == 5] = 4  # level 5 has no rows
    layout = LevelLayout(y, v, codes, J)
    for seed in range(20):
        got = hinge_levels.draw_level_effects(layout, eta, sigma2, np.random.default_rng(seed))
        expected = draw_levels(pieces(layout, eta[None, :]), sigma2, np.random.default_rng(seed))
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.sqrt(sigma2))
        # the same draw with the rest of the predictor taken from f and f moved to the new effects in the same call
        effects = np.random.default_rng(seed + 100).normal(0.0, 1.0, J)
        f = eta + v * effects[codes]
        moved = f.copy()
        new = hinge_levels.draw_level_effects_in_place(
            layout, moved, v, codes, effects, sigma2, np.random.default_rng(seed)
        )
        np.testing.assert_allclose(new, expected, rtol=1e-9, atol=1e-9 * np.sqrt(sigma2))
        np.testing.assert_allclose(moved, f - v * effects[codes] + v * new[codes], rtol=1e-12, atol=1e-12)


def _reference_log_term(a, c, lo, hi, sigma2):
    """``log(exp(a + c^2 sigma2 / 2) (Phi(beta) - Phi(alpha)))`` to 60 digits (mpmath), ``-inf`` for an empty interval."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    if not hi > lo:
        return -np.inf
    sd, centre = mp.sqrt(mp.mpf(sigma2)), mp.mpf(c) * mp.mpf(sigma2)
    alpha = (mp.mpf(lo) - centre) / sd if np.isfinite(lo) else -mp.inf
    beta = (mp.mpf(hi) - centre) / sd if np.isfinite(hi) else mp.inf
    mass = mp.ncdf(-alpha) - mp.ncdf(-beta) if alpha > 0 else mp.ncdf(beta) - mp.ncdf(alpha)
    return float(mp.mpf(a) + mp.mpf(c) ** 2 * mp.mpf(sigma2) / 2 + mp.log(mass))


@pytest.mark.parametrize("compiled", [True, False])
def test_interval_terms_match_a_60_digit_reference(compiled):
    """Every interval's term (``Phi`` taken directly where that keeps the digits, else written at the interval's ends
    or in logs), compiled and numpy, against mpmath's on intervals in the middle, in both tails, narrow and wide: to
    1e-13 for intervals of at least 1e-3 SD, 1e-10 from 1e-6, 1e-7 below (there the log of ``erfcx`` at the two ends,
    nearly equal, is differenced: the term is then at most the integrand's value times the width)."""
    if compiled and not compiled_rows.available():
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(5)
    ends = np.concatenate([rng.normal(0.0, 3.0, 600), rng.normal(0.0, 30.0, 600), [-np.inf, np.inf, 0.0]])
    widths = np.concatenate([rng.exponential(1.0, 600), 10.0 ** rng.uniform(-9, 1, 600), [1.0, 1.0, 0.0]])
    his = np.where(np.isfinite(ends), ends + widths, np.where(ends > 0, np.inf, 0.5))
    if compiled:
        got = np.array([hinge_levels._log_interval(0.3, 0.7, lo, hi, 2.0, np.sqrt(2.0)) for lo, hi in zip(ends, his)])
    else:
        part = hinge_levels.Pieces(a=np.full((1, 1, ends.size), 0.3), c=np.full((1, 1, ends.size), 0.7),
                                   lo=ends[None, None], hi=his[None, None])  # fmt: skip
        got = part.log_terms(np.array([2.0]))[0, 0]
    for lo, hi, term in zip(ends, his, got):
        expected = _reference_log_term(0.3, 0.7, lo, hi, 2.0)
        if np.isneginf(expected):
            assert np.isneginf(term)
            continue
        tolerance = 1e-13 if hi - lo >= 1e-3 * np.sqrt(2.0) else 1e-10 if hi - lo >= 1e-6 * np.sqrt(2.0) else 1e-7
        assert term == pytest.approx(expected, rel=tolerance, abs=tolerance)


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_interval_bounds_are_upper_bounds_of_the_terms():
    """The choice of an interval skips exact terms by ``_interval_bound``: it must never be below the term (else the
    choice could differ from evaluating every interval), here on intervals near and far from the vertex, narrow and
    wide, finite and not; and it is tight enough to matter (within 3 of the term for most intervals that hold the
    vertex)."""
    rng = np.random.default_rng(8)
    near = []
    for _ in range(20000):
        a, c, sigma2 = rng.normal(0, 5), rng.normal(0, 4), 10.0 ** rng.uniform(-4, 4)
        sd = np.sqrt(sigma2)
        lo = -np.inf if rng.random() < 0.1 else rng.normal(c * sigma2, 5 * sd)
        hi = np.inf if rng.random() < 0.1 else (lo if np.isfinite(lo) else rng.normal(0, 5 * sd)) + rng.exponential(sd)
        term = hinge_levels._log_interval(a, c, lo, hi, sigma2, sd)
        bound = hinge_levels._interval_bound(a, c, lo, hi, sigma2, sd)
        assert bound >= term - 1e-9 * max(1.0, abs(term))
        if lo < c * sigma2 < hi:
            near.append(bound - term)
    assert np.median(near) < 3.0


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_a_level_summed_in_scaled_terms_equals_the_log_sum_of_its_terms():
    """A small level's ``log I_j`` is the sum of its terms kept as ``exp(largest) * acc`` (no ``log`` per term): the
    log-sum-exp of the terms in logs, on intervals in the middle and far in both tails (where a term's scale is
    hundreds of nats above its value), with empty intervals and terms of very different sizes."""
    rng = np.random.default_rng(11)
    for _ in range(400):
        count = int(rng.integers(1, hinge_levels.WINDOWED_FROM + 1))
        kinks = np.sort(rng.normal(0.0, rng.choice([0.1, 3.0, 60.0]), count - 1))
        lo, hi = np.concatenate([[-np.inf], kinks]), np.concatenate([kinks, [np.inf]])
        a, c = rng.normal(0.0, 30.0, count), rng.normal(0.0, 8.0, count)
        sigma2 = float(10.0 ** rng.uniform(-3, 3))
        sd = np.sqrt(sigma2)
        terms = np.array(
            [hinge_levels._log_interval_in_logs(a[q], c[q], lo[q], hi[q], sigma2, sd) for q in range(count)]
        )
        got = hinge_levels._level_log_integral(a, c, lo, hi, count, sigma2, sd)
        assert got == pytest.approx(logsumexp(terms), rel=1e-12, abs=1e-10)


@pytest.mark.parametrize("compiled", [True, False])
def test_intervals_far_from_their_vertex_keep_their_digits(compiled, monkeypatch):
    """Rows of slopes near 2,000 under ``sigma2 = 10^6`` put an interval's vertex ``c sigma2`` millions of SDs away:
    ``a + c^2 sigma2 / 2`` and ``log Phi`` are each about 10^13 and cancel, which lost digits to 10^-3 in ``log I_j``.
    Written at the interval's ends (:func:`bayesvm.engines.hinge_levels.anchored_log_terms`) both paths match
    quadrature of the integrand between its kinks to 1e-10."""
    from scipy.integrate import quad

    if compiled and not compiled_rows.available():
        pytest.skip("numba is not installed")
    if not compiled:
        monkeypatch.setenv(compiled_rows.ENVIRONMENT_SWITCH, "0")
    margins = np.array([1.32086852, 1.27921689, 1.15658991, 0.59859424, 0.32378874, 2.38692299, 0.13643937, 0.85780753])
    slopes = np.array([0.943864, 1.190966, -1.387113, -0.994078, -0.714974, -1688.08034, 2099.54260, 1.885042])
    sigma2 = 973322.8
    y = np.ones(slopes.size)
    part = pieces(LevelLayout(y, slopes, np.zeros(slopes.size, dtype=int), 1), (1.0 - margins)[None, :])
    got = part.log_integral_sum(sigma2)

    def log_integrand(u):
        return -2.0 * np.maximum(0.0, margins - slopes * u).sum() - 0.5 * u * u / sigma2

    kinks = np.sort(margins / slopes)
    peak = max(log_integrand(k) for k in kinks)
    ends = np.concatenate([[-np.inf], kinks, [np.inf]])
    total = sum(
        quad(lambda u: np.exp(log_integrand(u) - peak), lo, hi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
        for lo, hi in zip(ends[:-1], ends[1:])
    )
    expected = peak + np.log(total) - 0.5 * np.log(2.0 * np.pi * sigma2)
    assert got == pytest.approx(expected, abs=1e-10)
