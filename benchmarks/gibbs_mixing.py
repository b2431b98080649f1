"""Gibbs mixing: effective samples per draw and per second, ``python -m benchmarks.gibbs_mixing``.

Min bulk ESS (ArviZ) over the fixed effects and variance-component SDs, per draw and per second of
sampling, run here in one process:

* toenail, ``outcome ~ visit * treatment + (1 | patientID)``, 4 chains x (1,000 tune + 2,500 draws) with the
  default ``cores`` (one process per chain up to the CPUs: 2 here; bambi's peer gets as many), ArviZ imported
  before the clock starts (its first import, about 3 s once per session, is not the sampler's): the default sampler (with the rescaling moves of :mod:`bayesvm.engines.linear.interweave`) next to the paper's
  sampler (``_interweave=False``), and bambi's NUTS on the logistic GLMM of the same formula where bambi is
  installed;
* spam with ``LaplaceZero()`` and ``SpikeSlab()``, 4 x (2,000 + 1,000) (the selection sampler's default tune): the largest R-hat and smallest bulk ESS of
  the inclusion probabilities' draws (each draw's ``P(gamma_k = 1 | the rest)``, whose average ``fit.inclusion``
  reports: Rao-Blackwellised; the indicators themselves for the papers' samplers) with the default moves (the swaps of :mod:`bayesvm.engines.selection.moves`, the
  updates and the exchanges of :mod:`bayesvm.engines.selection.marginal_pairs`, the line moves of
  :mod:`bayesvm.engines.selection.directions`, which run by default with Laplace-zero, and the sheared pair
  updates of :mod:`bayesvm.engines.selection.sheared_pairs`, and the model jumps of
  :mod:`bayesvm.engines.selection.model_jumps`), without the sheared updates (``shears=False``: the
  default before them), and with none of the moves (the papers' samplers);
* acath, ``sigdz ~ age + sex + log_dur + log_chol`` (as ``benchmarks.acath_impute``) with ``missing="impute"`` (joint
  imputation Gibbs), 4 x (1,000 + 1,000): min ESS and max R-hat with the moves of
  :mod:`bayesvm.engines.linear.interweave` (the default) and without (``_moves=False``, the paper's Appendix C).

* Fair's affairs (statsmodels, 6,366 rows: data none of the moves were tuned on, and more rows than
  ``interweave.GLOBAL_WIDTH_ROWS``), ``had_affair ~ age + yrs_married + children + rate_marriage + educ +
  (1 | occupation) + (1 | religious)``, 4 x (1,000 + 2,000): the default sampler against the paper's, min ESS, time,
  and the largest difference of the two posterior means in units of its Monte Carlo standard error (each
  sampler's SD over the square root of its smallest bulk ESS: conservative), as a check that both target the same
  posterior.

* a random intercept on mostly one-row, mostly one-class groups (:func:`one_row_groups`, simulated as MASS::bacteria
  looks; ``y ~ 1 + (1 | g)``), 4 x (300 + 1,500): the share of each chain's draws in the variance's smaller mode
  (``log sigma^2 > -3``; 14% by quadrature, ``tests/engines/linear/test_collapsed_variance.py``) and the R-hat of
  ``log sigma^2``, the default sampler (with the collapsed variance step of
  :mod:`bayesvm.engines.linear.collapsed_variance`) against the paper's.

bambi is not a dependency.  For ``benchmarks/RESULTS.md`` it is installed beside the package in a separate
environment: ``pip install -e . bambi "matplotlib<3.10"`` (bambi 0.17.2, pymc 5.28; arviz-plots 0.8, which bambi pulls
in, fails to import with matplotlib 3.11).  Its time includes pymc's compilation of the model, as a user's first fit
does.

* lme4's cbpp (``inc ~ C(period) + (1 | herd)``, 842 rows in 15 herds, the herd SD near 0; data none of the moves were
  tuned on), 4 x (1,000 + 1,000), seeds 1 and 2: the herd SD's bulk ESS and R-hat with the collapsed variance step
  switched on where the variance's draws stick (the default) against without that switch, and the largest mean
  difference in Monte Carlo SEs.

* patients nested in sites (:func:`nested_sites`, simulated; ``y ~ x + (1 | site/patient)``, 360 rows), 4 x (1,000 +
  1,000), seeds 1 and 2: the site SD's bulk ESS and R-hat with the moves of
  :mod:`bayesvm.engines.linear.nested_intercepts` (the default) against without it, and the largest mean difference in
  Monte Carlo SEs.

``--quick`` runs toenail only; ``--repeat N`` adds N alternating runs of the default sampler and bambi on toenail, each
pair's ratio of min-ESS per second and their median (also against pymc's own sampling clock, its compilation and set-up
left out); ``--fair`` the Fair check only; ``--spam`` the spam rows only; ``--one-row`` the
one-row groups only; ``--cbpp`` cbpp only; ``--nested`` the nested intercepts only; ``--spam-seeds 1 2 3`` spike-and-slab on spam with the default moves, once per seed, the
largest R-hat of the inclusion probabilities' Rao-Blackwellised draws next to the indicators'.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import bayesvm
from bayesvm.engines.linear import gibbs
from bayesvm.results.diagnostics import mcmc_diagnostics

TOENAIL = "outcome ~ visit * treatment + (1 | patientID)"


def _toenail(interweave: bool, seed: int) -> tuple[float, float, float, dict]:
    original = gibbs.sample_gibbs

    def sampler(*args, **kwargs):
        return original(*args, _interweave=interweave, **kwargs)

    gibbs.sample_gibbs = sampler
    try:
        start = time.perf_counter()
        fit = bayesvm.bsvm(
            TOENAIL, bayesvm.datasets.load_toenail(), method="gibbs", draws=2500, tune=1000, chains=4, seed=seed,
            progress=False,
        )  # fmt: skip
        seconds = time.perf_counter() - start
    finally:
        gibbs.sample_gibbs = original
    table = mcmc_diagnostics(fit)
    means = {name: float(value) for name, value in fit.fixef.items()}
    means["sigma^2 patientID"] = float(fit.variance_components[-1].mean[0, 0])
    return float(table["ess_bulk"].min()), float(table["r_hat"].max()), seconds, means


def _bambi_toenail() -> tuple[float, float, float] | None:
    try:
        import bambi
    except ImportError:
        return None
    data = bayesvm.datasets.load_toenail()
    data = data.assign(y=(data["outcome"] == "moderate or severe").astype(int))
    model = bambi.Model("y ~ visit * treatment + (1 | patientID)", data, family="bernoulli")
    start = time.perf_counter()
    from bayesvm.arguments import default_cores

    cores = default_cores(4)  # as many processes as bayesvm's default gives its chains
    idata = model.fit(draws=2500, tune=1000, chains=4, cores=cores, progressbar=False, random_seed=1)
    seconds = time.perf_counter() - start
    import arviz as az

    # the fixed effects and the patient SD (not the 294 per-patient effects or their offsets), as for bayesvm
    names = [v for v in idata.posterior.data_vars if "patientID" not in v or v.endswith("_sigma")]
    ess = az.ess(idata, var_names=names, method="bulk")
    sampling = float(idata.posterior.attrs.get("sampling_time", float("nan")))  # pymc's own clock: tuning and draws
    return float(min(float(np.min(ess[v])) for v in names)), seconds, sampling


def _repeat_ratio(repeats: int) -> None:
    """``--repeat N``: N more toenail runs of the default sampler and of bambi's NUTS, alternating in this process (both
    compiled by the runs above), each pair's ratio of min-ESS per second and their median: on a shared 2-core machine
    the two samplers' times swing by a third from run to run, mostly together, so one pair's ratio is a noisy
    estimate."""
    ratios, sampling_ratios = [], []
    for repeat in range(repeats):
        ess, _, seconds, _ = _toenail(True, seed=1)
        bambi_ess, bambi_seconds, bambi_sampling = _bambi_toenail()
        ratios.append((ess / seconds) / (bambi_ess / bambi_seconds))
        sampling_ratios.append((ess / seconds) / (bambi_ess / bambi_sampling))
        print(
            f"repeat {repeat + 1}: bayesvm {ess / seconds:.0f} ESS/s ({seconds:.1f} s), bambi {bambi_ess / bambi_seconds:.1f}"
            f" ESS/s ({bambi_seconds:.1f} s; sampling {bambi_sampling:.1f} s): {ratios[-1]:.1f} times ("
            f"{sampling_ratios[-1]:.1f} against bambi's sampling time alone)"
        )
    for label, values in (("", ratios), (", against bambi's sampling time alone", sampling_ratios)):
        print(f"ratio of min-ESS per second over {repeats} repeats{label}: median {np.median(values):.1f}, range "
              f"{min(values):.1f}-{max(values):.1f}")  # fmt: skip


def _spam_selection(spam, prior, moves: dict, seed: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """R-hat and bulk ESS of every inclusion probability's draws (Rao-Blackwellised where the sampler keeps them,
    else the indicators), and the seconds, of a 4 x (2000 + 1000) selection Gibbs fit (the default tune) with the sampler's ``moves``
    switches (``swaps``, ``pairs``, ``exchanges``, ``lines``, ``shears``)."""
    import arviz as az

    from bayesvm.engines.selection import gibbs as selection_gibbs

    original = selection_gibbs.sample_selection

    def sampler(*args, **kwargs):
        return original(*args, **moves, **kwargs)

    selection_gibbs.sample_selection = sampler
    try:
        start = time.perf_counter()
        fit = bayesvm.bsvm(
            "type ~ .", spam, prior=prior, method="gibbs", draws=1000, chains=4, seed=seed, progress=False
        )  # fmt: skip  (the default tune: 2,000 for a selection prior)
        seconds = time.perf_counter() - start
    finally:
        selection_gibbs.sample_selection = original
    # (chains, draws, slopes): each draw's P(gamma_k = 1 | the rest), whose average is the reported inclusion
    # probability (Rao-Blackwellised), where the sampler keeps it; the papers' sampler has only the indicators
    draws = fit.result.include_probability
    include = az.convert_to_dataset({"include": fit.result.include.astype(float) if draws is None else draws})
    rhat = np.asarray(az.rhat(include)["include"].values, dtype=float)
    ess = np.asarray(az.ess(include, method="bulk")["include"].values, dtype=float)
    _LAST_FIT[:] = [fit]
    return rhat, ess, seconds


_LAST_FIT: list = []  # the last spam fit of _spam_selection (for --spam-seeds)


def _spam_seeds(seeds: list[int]) -> None:
    """``--spam-seeds``: spike-and-slab with the default moves on each seed, the largest R-hat of the inclusion
    probabilities' Rao-Blackwellised draws (what ``fit.inclusion`` averages) next to the indicators' own."""
    import arviz as az

    spam = bayesvm.datasets.load_spam()
    for seed in seeds:
        rhat, ess, seconds = _spam_selection(spam, bayesvm.priors.SpikeSlab(), {}, seed=seed)
        fit = _LAST_FIT[0]
        indicators = az.convert_to_dataset({"v": fit.result.include.astype(float)})
        rhat_ind = np.asarray(az.rhat(indicators)["v"].values, dtype=float)
        names = list(fit.inclusion.index)
        worst, worst_ind = int(np.nanargmax(rhat)), int(np.nanargmax(rhat_ind))
        print(
            f"spam, SpikeSlab Gibbs (default), 4 x ({fit.result.tune} + 1000), seed {seed}: inclusion probabilities max R-hat "
            f"{rhat[worst]:.3f} ({names[worst]}), min bulk ESS {np.nanmin(ess):.0f}; indicators max R-hat "
            f"{rhat_ind[worst_ind]:.3f} ({names[worst_ind]}); {seconds:.1f} s"
        )


FAIR = "had_affair ~ age + yrs_married + children + rate_marriage + educ + (1 | occupation) + (1 | religious)"


def _fair() -> None:
    import statsmodels.api as sm

    data = sm.datasets.fair.load_pandas().data
    data = data.assign(
        had_affair=np.where(data["affairs"] > 0, "yes", "no"),
        occupation=data["occupation"].astype(int).astype(str),
        religious=data["religious"].astype(int).astype(str),
    )
    original, runs = gibbs.sample_gibbs, {}
    for label, interweave in (("default", True), ("paper", False)):
        gibbs.sample_gibbs = lambda *a, interweave=interweave, **k: original(*a, _interweave=interweave, **k)
        try:
            start = time.perf_counter()
            fit = bayesvm.bsvm(FAIR, data, method="gibbs", draws=2000, tune=1000, chains=4, seed=3, progress=False)
            seconds = time.perf_counter() - start
        finally:
            gibbs.sample_gibbs = original
        table = mcmc_diagnostics(fit)
        theta = fit.result.theta_d.reshape(-1, fit.result.theta_d.shape[-1])
        runs[label] = (theta, float(table["ess_bulk"].min()), float(table["r_hat"].max()), seconds)
        print(
            f"Fair affairs ({len(data)} rows), Gibbs {label}, 4 x (1000 + 2000): min bulk ESS {runs[label][1]:.0f}, "
            f"max R-hat {runs[label][2]:.3f}; {seconds:.1f} s; {runs[label][1] / seconds:.1f} ESS/s"
        )
    (a, ess_a, _, _), (b, ess_b, _, _) = runs["default"], runs["paper"]
    error = np.sqrt(a.var(axis=0) / ess_a + b.var(axis=0) / ess_b)
    print(f"Fair affairs: largest |mean difference| / Monte Carlo SE over the coefficients: "
          f"{np.max(np.abs(a.mean(axis=0) - b.mean(axis=0)) / error):.2f}")  # fmt: skip


def one_row_groups(seed: int = 13, groups: int = 30):
    """Mostly one-row groups and mostly one class (as MASS::bacteria): the pseudo-posterior of the random intercept's
    variance has a mode near 0 and a smaller one (14% of the mass above ``log sigma^2 = -3``) near 1."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 1, 1, 2, 3, 6], groups)
    g = np.repeat(np.arange(groups), sizes)
    u = rng.normal(0.0, 1.2, groups)
    y = np.where(rng.random(g.size) < 1 / (1 + np.exp(-(1.5 + u[g]))), "a", "b")
    return pd.DataFrame({"y": y, "g": g.astype(str)})


def _one_row() -> None:
    """The one-row groups of the module docstring (``--one-row`` runs only these)."""
    import arviz as az

    data = one_row_groups()
    original = gibbs.sample_gibbs
    for label, interweave in (("default", True), ("paper", False)):
        gibbs.sample_gibbs = lambda *a, interweave=interweave, **k: original(*a, _interweave=interweave, **k)
        try:
            start = time.perf_counter()
            fit = bayesvm.bsvm("y ~ 1 + (1 | g)", data, method="gibbs", penalty=1.0, draws=1500, tune=300, chains=4,
                               seed=2, progress=False)  # fmt: skip
            seconds = time.perf_counter() - start
        finally:
            gibbs.sample_gibbs = original
        log_variance = np.log(fit.result.components[0][..., 0, 0])
        shares = ", ".join(f"{share:.0%}" for share in np.mean(log_variance > -3, axis=1))
        rhat = float(az.rhat(az.convert_to_dataset({"v": log_variance}))["v"])
        print(
            f"one-row groups ({len(data)} rows, 30 groups), Gibbs {label}, 4 x (300 + 1500): share of each chain in "
            f"the smaller mode {shares} (14% exact), R-hat of log sigma^2 {rhat:.2f}; {seconds:.1f} s"
        )


#: lme4's ``cbpp`` (Lesnoff et al. 2004; ``data(cbpp)`` in R's lme4): (herd, incidence, size, period), contagious
#: bovine pleuropneumonia in 15 herds of Ethiopian zebu cattle over four periods.
CBPP = (
    (1, 2, 14, 1), (1, 3, 12, 2), (1, 4, 9, 3), (1, 0, 5, 4), (2, 3, 22, 1), (2, 1, 18, 2), (2, 1, 21, 3),
    (3, 8, 22, 1), (3, 2, 16, 2), (3, 0, 16, 3), (3, 2, 20, 4), (4, 2, 10, 1), (4, 0, 10, 2), (4, 2, 9, 3),
    (4, 0, 6, 4), (5, 5, 18, 1), (5, 0, 25, 2), (5, 0, 24, 3), (5, 1, 4, 4), (6, 3, 17, 1), (6, 0, 17, 2),
    (6, 0, 18, 3), (6, 1, 20, 4), (7, 8, 16, 1), (7, 1, 10, 2), (7, 3, 9, 3), (7, 0, 5, 4), (8, 12, 34, 1),
    (9, 2, 9, 1), (9, 0, 6, 2), (9, 0, 8, 3), (9, 0, 6, 4), (10, 1, 22, 1), (10, 1, 22, 2), (10, 0, 18, 3),
    (10, 2, 22, 4), (11, 0, 25, 1), (11, 5, 27, 2), (11, 3, 22, 3), (11, 1, 22, 4), (12, 2, 10, 1), (12, 1, 8, 2),
    (12, 0, 6, 3), (12, 0, 5, 4), (13, 1, 21, 1), (13, 2, 24, 2), (13, 0, 19, 3), (13, 0, 23, 4), (14, 11, 19, 1),
    (14, 0, 2, 2), (14, 0, 3, 3), (14, 0, 2, 4), (15, 1, 19, 1), (15, 1, 15, 2), (15, 1, 15, 3), (15, 0, 15, 4),
)  # fmt: skip


def cbpp():
    """lme4's ``cbpp`` one row per animal (842 rows): ``inc`` 1 for an incident case, ``herd`` and ``period``."""
    import pandas as pd

    rows = [(herd, period, int(k < cases)) for herd, cases, size, period in CBPP for k in range(size)]
    return pd.DataFrame(rows, columns=["herd", "period", "inc"]).astype({"herd": str, "period": str})


def _against_variant(name: str, data, formula: str, variant: str, patch, watched: str) -> None:
    """The default sampler against a variant (``patch()`` switches the variant on and returns the function that
    switches it off), 4 x (1,000 + 1,000), seeds 1 and 2: the bulk ESS, R-hat and median of the SD of the term
    ``watched`` (e.g. ``"(1 | herd)"``), the smallest ESS, the largest R-hat and the time, then the largest difference
    of the two posterior means over the fixed effects and the SDs in units of its Monte Carlo SE (each sampler's SD
    over the square root of its smallest bulk ESS: conservative)."""
    for seed in (1, 2):
        runs = {}
        for label in ("default", variant):
            undo = patch() if label == variant else (lambda: None)
            try:
                start = time.perf_counter()
                fit = bayesvm.bsvm(formula, data, method="gibbs", draws=1000, tune=1000, chains=4, seed=seed,
                                   progress=False)  # fmt: skip
                seconds = time.perf_counter() - start
            finally:
                undo()
            table = mcmc_diagnostics(fit)
            names = [comp.name for comp in fit.problem.components]
            sds = [np.sqrt(draws[..., 0, 0]).reshape(-1, 1) for draws in fit.result.components]
            sd = sds[names.index(watched)]
            row = f"sd_{watched.split('|')[1].strip(' )')}[(Intercept)]"  # the diagnostics' name of that SD
            theta = fit.result.theta_d.reshape(-1, fit.result.theta_d.shape[-1])[:, : fit.model.design.p]
            runs[label] = (np.hstack([theta, *sds]), float(table["ess_bulk"].min()))
            print(
                f"{name}, {formula}, Gibbs {label}, seed {seed}, 4 x (1000 + 1000): SD of {watched} bulk ESS "
                f"{table.loc[row, 'ess_bulk']:.0f}, R-hat {table.loc[row, 'r_hat']:.3f}, median {np.median(sd):.4f}; "
                f"min bulk ESS {table['ess_bulk'].min():.0f}, max R-hat {table['r_hat'].max():.3f}; {seconds:.1f} s"
            )
        (a, ess_a), (b, ess_b) = runs["default"], runs[variant]
        error = np.sqrt(a.var(axis=0) / ess_a + b.var(axis=0) / ess_b)
        print(f"{name} seed {seed}: largest |mean difference| / Monte Carlo SE over the fixed effects and SDs: "
              f"{np.max(np.abs(a.mean(axis=0) - b.mean(axis=0)) / error):.2f}")  # fmt: skip


def _cbpp() -> None:
    """lme4's cbpp (module docstring; ``--cbpp`` runs only this): the collapsed variance step switched on where the
    herd variance's draws stick (the default) against the sampler without that switch (the default before it)."""
    from bayesvm.engines.linear import collapsed_variance

    sticky = collapsed_variance.STICKY_LAG1

    def without_switch():
        collapsed_variance.STICKY_LAG1 = np.inf
        return lambda: setattr(collapsed_variance, "STICKY_LAG1", sticky)

    data = cbpp()
    _against_variant(f"cbpp ({len(data)} rows, 15 herds)", data, "inc ~ C(period) + (1 | herd)", "without the switch",
                     without_switch, "(1 | herd)")  # fmt: skip


def nested_sites(seed: int = 0, sites: int = 60, patients: int = 2, rows: int = 3):
    """Patients nested in sites, the site SD (0.5) small beside the patients' (1.5): ``y ~ x + (1 | site/patient)``."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    site = np.repeat(np.arange(sites), patients * rows)
    patient = np.repeat(np.arange(sites * patients), rows)
    x = rng.normal(size=site.size)
    f = 0.3 + rng.normal(0, 0.5, sites)[site] + rng.normal(0, 1.5, sites * patients)[patient] + 0.7 * x
    f = f + 0.5 * rng.normal(size=site.size)
    y = (rng.random(site.size) < 1 / (1 + np.exp(-f))).astype(int)
    return pd.DataFrame({"y": y, "x": x, "site": site.astype(str), "patient": patient.astype(str)})


def _nested() -> None:
    """Nested random intercepts (module docstring; ``--nested`` runs only this): the moves of
    :mod:`bayesvm.engines.linear.nested_intercepts` (the default) against the sampler without them."""
    from bayesvm.engines.linear import collapsed_variance

    original = collapsed_variance.nested_intercepts

    def without_moves():
        collapsed_variance.nested_intercepts = lambda problem, terms: []
        return lambda: setattr(collapsed_variance, "nested_intercepts", original)

    data = nested_sites()
    _against_variant(f"nested sites ({len(data)} rows, 60 sites, 120 patients)", data, "y ~ x + (1 | site/patient)",
                     "without the nested-intercept moves", without_moves, "(1 | site)")  # fmt: skip


def _spam() -> None:
    """The spam rows of the module docstring (``--spam`` runs only these)."""
    spam = bayesvm.datasets.load_spam()
    for prior in (bayesvm.priors.LaplaceZero(), bayesvm.priors.SpikeSlab()):
        variants = (
            ("default", {}),
            ("without sheared pair updates", {"shears": False}),
            (
                "papers' sampler",
                {"swaps": False, "pairs": False, "exchanges": False, "lines": False, "shears": False, "jumps": False},
            ),
        )
        for label, moves in variants:
            rhat, ess, seconds = _spam_selection(spam, prior, moves)
            print(
                f"spam, {type(prior).__name__} Gibbs ({label}), 4 x ({_LAST_FIT[0].result.tune} + 1000): inclusion probabilities max R-hat "
                f"{np.nanmax(rhat):.3f} ({int(np.sum(rhat > 1.05))} of {rhat.size} above 1.05), min bulk ESS "
                f"{np.nanmin(ess):.0f}; {seconds:.1f} s"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fair", action="store_true")
    parser.add_argument("--spam", action="store_true")
    parser.add_argument("--one-row", action="store_true")
    parser.add_argument("--cbpp", action="store_true")
    parser.add_argument("--nested", action="store_true")
    parser.add_argument("--spam-seeds", type=int, nargs="+", metavar="SEED")
    parser.add_argument("--repeat", type=int, default=1, metavar="N")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.spam_seeds:
        _spam_seeds(args.spam_seeds)
        return
    if args.one_row:
        _one_row()
        return
    if args.cbpp:
        _cbpp()
        return
    if args.nested:
        _nested()
        return
    if args.fair:
        _fair()
        return
    if args.spam:
        _spam()
        return
    draws = 4 * 2500
    import arviz  # noqa: F401 - imported before the clock starts (module docstring)

    from bayesvm.arguments import default_cores

    print(f"toenail, {TOENAIL}, 4 x (1000 + 2500), default cores ({default_cores(4)} processes)")
    print(f"{'sampler':<34} {'min ESS':>8} {'ESS/draw':>9} {'ESS/s':>7} {'max R-hat':>10} {'seconds':>8}")
    runs = {}
    for label, interweave in (("bayesvm Gibbs (default)", True), ("bayesvm Gibbs, paper (no moves)", False)):
        ess, rhat, seconds, means = _toenail(interweave, seed=1)
        runs[label] = means
        print(f"{label:<34} {ess:>8.0f} {ess / draws:>9.3f} {ess / seconds:>7.1f} {rhat:>10.3f} {seconds:>8.1f}")
    bambi = _bambi_toenail()
    if bambi is None:
        print(f"{'bambi NUTS (logistic GLMM)':<34} not installed (pip install bambi)")
    else:
        ess, seconds, sampling = bambi
        print(
            f"{'bambi NUTS (logistic GLMM)':<34} {ess:>8.0f} {ess / draws:>9.3f} {ess / seconds:>7.1f} {'':>10} {seconds:>8.1f}"
            f"  (of which sampling {sampling:.1f} s: {ess / sampling:.1f} ESS/s)"
        )
    default, paper = runs.values()
    print("posterior means, default against paper sampler: " + ", ".join(
        f"{name} {default[name]:.3f} / {paper[name]:.3f}" for name in default
    ))  # fmt: skip
    if args.repeat > 1 and bambi is not None:
        _repeat_ratio(args.repeat)
    if args.quick:
        return
    _spam()
    from bayesvm.engines.imputation import joint_model
    from benchmarks.acath_impute import FORMULA, data

    original = joint_model.sample_impute_gibbs
    for moves in (True, False):
        joint_model.sample_impute_gibbs = lambda *a, moves=moves, **k: original(*a, _moves=moves, **k)
        start = time.perf_counter()
        try:
            fit = bayesvm.bsvm(
                FORMULA, data(), missing="impute", imputation="joint",
                method="gibbs", draws=1000, tune=1000, chains=4, seed=1, progress=False,
            )  # fmt: skip
        finally:
            joint_model.sample_impute_gibbs = original
        seconds = time.perf_counter() - start
        table = mcmc_diagnostics(fit)
        print(
            f"acath, joint imputation Gibbs{'' if moves else ' without moves (paper)'}, 4 x (1000 + 1000): min bulk "
            f"ESS {table['ess_bulk'].min():.0f}, max R-hat {table['r_hat'].max():.3f}; {seconds:.1f} s; means "
            + ", ".join(f"{name} {value:.3f}" for name, value in fit.fixef.items())
        )
    _fair()
    _one_row()
    _cbpp()
    _nested()


if __name__ == "__main__":
    main()
