"""A random intercept over a few large levels: the default fit, its PSIS check and statsmodels' fit_vb.

Fair's affairs survey (statsmodels' ``fair`` data set, 6,366 wives; response: any affair) with a random intercept per
husband's occupation: 6 levels of tens to thousands of rows.  The accurate fit weights its nodes by the levels integrated out
in closed form and the PSIS check at its end integrates them again at every draw, so both pay for the largest levels'
thousands of kinks per draw (:mod:`bayesvm.engines.hinge_levels`).  Prints the whole ``bsvm()`` call, the engine alone, a second
PSIS check run by itself (``fit.check_vb()``) beside the engine's time, and statsmodels'
``BinomialBayesMixedGLM.fit_vb`` on the same formula (a logistic GLMM: the cost of a variational mixed-model fit is
compared, not the estimates), each the median of 3 in one process.

    python -m benchmarks.few_large_levels
"""

from __future__ import annotations

import statistics
import time
import warnings

import bayesvm

REPEATS = 3
FORMULA = "affair ~ rate_marriage + age + yrs_married + children + religious + educ"


def _timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    value = function()
    return time.perf_counter() - start, value


def main() -> None:
    import statsmodels.api as sm
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    data = sm.datasets.fair.load_pandas().data
    data = data.assign(affair=(data["affairs"] > 0).astype(int), occupation=data["occupation"].astype(int).astype(str))
    formula = FORMULA + " + (1 | occupation)"
    sizes = data["occupation"].value_counts()
    bayesvm.bsvm(formula, data.sample(600, random_state=0), progress=False)  # warm-up (imports, compiled functions)
    calls, engines, checks = [], [], []
    for _ in range(REPEATS):
        seconds, fit = _timed(lambda: bayesvm.bsvm(formula, data, progress=False))
        calls.append(seconds)
        engines.append(fit.elapsed)
        checks.append(_timed(lambda fit=fit: fit.check_vb(warn=False))[0])
    model = BinomialBayesMixedGLM.from_formula(FORMULA, {"occupation": "0 + C(occupation)"}, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = statistics.median(_timed(model.fit_vb)[0] for _ in range(REPEATS))
    call, engine, check = (statistics.median(v) for v in (calls, engines, checks))
    print(
        f"Fair affairs, n = {len(data)}, (1 | occupation): {sizes.size} levels of {sizes.min()} to {sizes.max()} rows; "
        f"median of {REPEATS}"
    )
    nodes = len(fit.result.weights)
    print(f"  bayesvm bsvm() call (default: accurate VB + PSIS check): {1000 * call:8.1f} ms ({nodes} nodes)")
    print(f"  bayesvm engine alone:                                     {1000 * engine:8.1f} ms")
    print(f"  bayesvm PSIS check by itself (fit.check_vb()):            {1000 * check:8.1f} ms")
    print(f"  statsmodels BinomialBayesMixedGLM.fit_vb:                 {1000 * peer:8.1f} ms")
    print(f"  ratio check / engine:             {check / engine:.2f}")
    print(f"  ratio ours / peer (whole call):   {call / peer:.2f}")


if __name__ == "__main__":
    main()
