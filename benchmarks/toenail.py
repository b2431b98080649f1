"""Toenail random-intercept fit: bayesvm VB against statsmodels' BinomialBayesMixedGLM.fit_vb.

Same data, same fixed effects (visit * treatment) and a random intercept per patient, both
run here in one process; each timed 5 times, medians compared.  statsmodels fits a logistic
GLMM (a different likelihood), so this compares the cost of a variational mixed-model fit,
not the estimates.

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


def main() -> None:
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    toenail = bayesvm.datasets.load_toenail()
    formula = "outcome ~ visit * treatment + (1 | patientID)"
    bayesvm.bsvm(formula, toenail, penalty=None)  # warm-up (imports, caches)
    fits = []
    ours_total = time_call(lambda: fits.append(bayesvm.bsvm(formula, toenail, penalty=None)))
    ours_engine = [fit.elapsed for fit in fits]

    data = toenail.assign(y=(toenail["outcome"] == "moderate or severe").astype(float))
    model = BinomialBayesMixedGLM.from_formula("y ~ visit * treatment", {"patient": "0 + C(patientID)"}, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = time_call(model.fit_vb)

    ours_t, ours_e, peer_t = (statistics.median(v) for v in (ours_total, ours_engine, peer))
    print(f"toenail random intercept, n = {len(toenail)}, 294 patients; median of {REPEATS}")
    print(
        f"  bayesvm bsvm() call (formula + VB + PSIS check + result): {1000 * ours_t:8.1f} ms ({fits[-1].n_iter} sweeps)"
    )
    print(f"  bayesvm VB engine alone:                                  {1000 * ours_e:8.1f} ms")
    print(f"  statsmodels BinomialBayesMixedGLM.fit_vb:                 {1000 * peer_t:8.1f} ms")
    print(f"  ratio ours / peer (whole call): {ours_t / peer_t:.4f}  (1/{peer_t / ours_t:.0f})")
    print(f"  ratio ours / peer (engine):     {ours_e / peer_t:.4f}  (1/{peer_t / ours_e:.0f})")


if __name__ == "__main__":
    main()
