"""Toenail random-intercept fit: bayesvm VB against statsmodels' BinomialBayesMixedGLM.fit_vb.

Same data, same fixed effects (visit * treatment) and a random intercept per patient, both
run here in one process; each timed 5 times, medians compared: bayesvm's accurate fit (what ``vb=None`` chooses) and
its mean-field VB, each with the PSIS check it ends with, with ``penalty=None`` (vague priors on the fixed effects, as
statsmodels' model has: one variance hyperparameter, integrated on a line).  The call as the README writes it learns
the penalty too (a second variance hyperparameter: a lattice of about 150 EP fits); its time is printed beside them.
statsmodels fits a logistic GLMM (a different likelihood), so this compares the cost of a variational mixed-model
fit, not the estimates.

    python benchmarks/toenail.py
"""

from __future__ import annotations

import statistics
import time
import warnings

import bayesvm

REPEATS = 5


def time_call(function, repeats: int = REPEATS) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        out.append(time.perf_counter() - start)
    return out


def _ours(formula: str, data, vb: str | None, penalty=None) -> tuple[float, float, float, object]:
    """Median whole call, engine and PSIS check by itself (``fit.check_vb()``) over :data:`REPEATS` calls."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (mean-field VB's check warns, as it should, on every call)
        bayesvm.bsvm(formula, data, penalty=penalty, vb=vb)  # warm-up (imports, caches)
        fits = []
        total = time_call(lambda: fits.append(bayesvm.bsvm(formula, data, penalty=penalty, vb=vb)))
        check = time_call(lambda: fits[-1].check_vb(warn=False))
    engine = [fit.elapsed for fit in fits]
    return statistics.median(total), statistics.median(engine), statistics.median(check), fits[-1]


def main() -> None:
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    toenail = bayesvm.datasets.load_toenail()
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    ours_t, ours_e, ours_c, fit = _ours(formula, toenail, None)
    mf_t, mf_e, mf_c, mf_fit = _ours(formula, toenail, "meanfield")
    learned = _ours(formula, toenail, None, penalty="learn")

    data = toenail.assign(y=(toenail["outcome"] == "moderate or severe").astype(float))
    model = BinomialBayesMixedGLM.from_formula("y ~ visit * treatment", {"patient": "0 + C(patientID)"}, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer_t = statistics.median(time_call(model.fit_vb))

    print(f"toenail random intercept, n = {len(toenail)}, 294 patients; median of {REPEATS}")
    print(f"  statsmodels BinomialBayesMixedGLM.fit_vb:                   {1000 * peer_t:8.1f} ms")
    for label, (whole, engine, check, one) in {
        "penalty=None, accurate VB (vb=None's choice)": (ours_t, ours_e, ours_c, fit),
        "penalty=None, mean-field VB": (mf_t, mf_e, mf_c, mf_fit),
        "the README's call (the penalty learned too), accurate VB": learned,
    }.items():
        print(f"  bayesvm, {label}")
        print(f"    bsvm() call (formula + VB + PSIS check + result):         {1000 * whole:8.1f} ms")
        print(f"    VB engine alone:                                          {1000 * engine:8.1f} ms")
        print(
            f"    PSIS check by itself (fit.check_vb()):                    {1000 * check:8.1f} ms "
            f"({one.check_vb(warn=False).draws} draws; check / engine {check / engine:.2f})"
        )
        print(f"    ratio ours / peer (whole call): {whole / peer_t:.4f}  (1/{peer_t / whole:.0f})")
        print(f"    ratio ours / peer (engine):     {engine / peer_t:.4f}  (1/{peer_t / engine:.0f})")


if __name__ == "__main__":
    main()
