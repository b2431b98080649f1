"""``Control``: how the engines run, kept apart from what the model is (as lme4's ``glmerControl``).

``bsvm(formula, data, method=..., penalty=..., prior=..., missing=..., kernel=...)`` says what to fit;
``control=bayesvm.Control(draws=4000, chains=4)`` says how long and how to run it.  Every field may also be
given to ``bsvm()`` as a keyword (``bsvm(..., method="gibbs", draws=4000)``), as pymc's and bambi's
samplers take them; giving the same field both ways is an error.
"""

from __future__ import annotations

import difflib
import numbers
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from .errors import BayesvmError


@dataclass(frozen=True)
class Control:
    """Engine settings of :func:`bayesvm.bsvm` (defaults in brackets).

    Iterative engines (VB, EM, SVI)
        ``tol`` (VB 1e-8: relative increase of the lower bound; EM 1e-10: largest coefficient change;
        SVI 1e-4) and ``max_iter`` (VB 500 sweeps, 2000 with ``LaplaceZero``; EM 20,000; SVI 100,000).
        ``None`` picks the engine's default.
    Gibbs sampling
        ``draws`` [1000] kept draws per chain, or ``"auto"``: sample until every fixed effect,
        variance-component SD and (selection priors) inclusion probability has R-hat <= 1.01 and bulk ESS >= 400
        (batches of 250 draws, at most 20,000 per chain or 10 minutes; not with ``missing="impute"``);
        ``tune`` [None: 1000, or 2000 with a selection prior (``LaplaceZero``, ``SpikeSlab``), whose sheared pair
        updates learn their directions from the tuning draws: :func:`default_tune`] burn-in iterations;
        ``chains`` [4]; ``thin`` [1];
        ``cores`` [None: one process per chain up to the CPUs available where processes fork (Linux), else 1;
        :func:`bayesvm.arguments.default_cores`] processes to run chains in (the draws do not depend on it);
        ``progress`` [True] a tqdm bar on a terminal (also for the accurate fit's nodes and the probability
        calibration's fold fits, once they have run for two seconds).
    Stochastic VI (``method="svi"``)
        ``batch_size`` [100] rows per minibatch; ``learning_rate`` [``"robbins-monro"``: ``t^-0.51``],
        ``"adaptive"`` (Ranganath et al. 2013) or a constant in (0, 1].
    Sparse mean-field VB (several grouping factors with many levels, e.g. crossed ``(1|a) + (1|b)``)
        ``probes`` [None: exact]: estimate the variance terms with this many Rao-Blackwellised Monte Carlo
        probes and conjugate gradients instead of factorising the precision
        (:mod:`bayesvm.linalg.probes`).  Means, and every covariance with the fixed effects, stay
        exact; the other variances carry a Monte Carlo error that ``summary()`` reports.  For crossed
        factors with thousands of levels each, where the exact fit costs ``(levels)^3`` per sweep; 32 is a
        good start, seeded from ``seed`` (0 when None) so a fit is reproducible.
    Kernel fits
        ``inducing`` [``min(n, 100)``] inducing points, ``"all"`` (the full kernel) or an ``(M, d)`` array;
        ``inducing_method`` [``"kmeans"``] or ``"random"``; ``learn_inducing`` [False] optimise them.
    ``missing="impute"``
        ``imputation`` [``"auto"``: the joint model where it applies, else multiple imputation,
        :func:`bayesvm.engines.defaults.default_imputation`], ``"joint"`` (the paper's joint model, Luts & Ormerod 2014
        section 3.3) or ``"mi"`` (multiple imputation, pooled); ``imputations`` [20] completed data sets for ``"mi"``.
    """

    tol: float | None = None
    max_iter: int | None = None
    draws: int | str = 1000
    tune: int | None = None
    chains: int = 4
    thin: int = 1
    cores: int | None = None
    progress: bool = True
    batch_size: int = 100
    learning_rate: str | float = "robbins-monro"
    probes: int | None = None
    inducing: int | str | np.ndarray | None = None
    inducing_method: str = "kmeans"
    learn_inducing: bool = False
    imputation: str = "auto"
    imputations: int = 20

    def as_options(self) -> dict:
        """The fields as ``bsvm()`` keywords (arrays kept as they are)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


CONTROL_FIELDS = tuple(f.name for f in fields(Control))
#: Settings that only the samplers (``method="gibbs"``) read (``cores``, where any process runs, is not one: the
#: cross-fitting fold fits set it for every method).
SAMPLING_FIELDS = ("draws", "tune", "chains", "thin")
#: Most chains one fit may run (each is a full run of the sampler).
MAX_CHAINS = 128
#: Most completed data sets multiple imputation may fit.
MAX_IMPUTATIONS = 1000


def check_settings_apply(control: Control, method: str, vb: object) -> None:
    """Refuse settings the chosen engine would ignore, naming them: sampling settings (``draws=`` ...) without
    ``method="gibbs"``, ``vb=`` with the samplers or EM; and requests past :data:`MAX_CHAINS` chains or
    :data:`MAX_IMPUTATIONS` imputations.

    Raises
    ------
    BayesvmError
        Naming the setting and the method that would not use it.
    """
    defaults = Control()
    if method != "gibbs":
        given = [name for name in SAMPLING_FIELDS if not _same(getattr(control, name), getattr(defaults, name))]
        if given:
            raise BayesvmError(
                f"{', '.join(f'{name}=' for name in given)} only apply to method='gibbs' (the samplers); "
                f"method={method!r} would ignore them"
            )
    if vb is not None and method in ("gibbs", "em"):
        raise BayesvmError(
            f"vb={vb!r} goes with method='vb' (and 'svi'), where it chooses the variational engine; "
            f"method={method!r} would ignore it"
        )
    chains = control.chains
    if isinstance(chains, numbers.Integral) and not isinstance(chains, bool) and chains > MAX_CHAINS:
        raise BayesvmError(f"chains={chains:,} is more than {MAX_CHAINS}; run fewer, longer chains (draws=)")
    imputations = control.imputations
    if isinstance(imputations, numbers.Integral) and not isinstance(imputations, bool):
        if imputations > MAX_IMPUTATIONS:
            raise BayesvmError(
                f"imputations={imputations:,} is more than {MAX_IMPUTATIONS}; 20-100 completed data sets are plenty"
            )


def default_tune(tune: int | None, selection: bool) -> int | None:
    """``tune`` as given, or the default burn-in when it is ``None``: the selection sampler's
    (:data:`bayesvm.engines.selection.gibbs.TUNE`) for a prior with inclusion indicators, else the other samplers'
    (:data:`bayesvm.engines.gibbs_driver.TUNE`).  Each sampler owns its default; they are imported here only when a
    Gibbs fit runs.  A given value is returned unchanged for the caller to check."""
    if tune is not None:
        return tune
    if selection:
        from .engines.selection.gibbs import TUNE as SELECTION_TUNE

        return SELECTION_TUNE
    from .engines.gibbs_driver import TUNE as GIBBS_TUNE

    return GIBBS_TUNE


#: Arguments of glm/glmer and scikit-learn a call of ``bsvm()`` may carry, and what says the same here
OTHER_PACKAGES_ARGUMENTS = {
    "weights": "per-row weights are not supported; class_weight= weighs each class's rows",
    "sample_weight": "per-row weights are not supported; class_weight= weighs each class's rows",
    "family": "the model is the SVM's hinge pseudo-likelihood, not a GLM family",
    "subset": "pass the rows to fit, data[mask]",
    "na_action": "missing='drop' fits the complete rows, missing='impute' imputes",
    "nAGQ": "vb='accurate', the default where it applies, integrates over the variance parameters",
    "offset": "an offset, a fixed part of the decision value, is not supported",
    "C": "penalty=alpha is scikit-learn's C = 1 / (2 alpha); the default learns it",
}


def _unknown_argument_hint(name: str) -> str:
    """What says the same as another package's argument, else the nearest field's name, else nothing."""
    if name in OTHER_PACKAGES_ARGUMENTS:
        return f" ({OTHER_PACKAGES_ARGUMENTS[name]})"
    nearest = difflib.get_close_matches(name, CONTROL_FIELDS, n=1)
    return f" (did you mean {nearest[0]!r}?)" if nearest else ""


def resolve_control(control: object, options: dict) -> Control:
    """``control`` (or the defaults) with the keyword shorthand ``options`` applied.

    Raises
    ------
    BayesvmError
        ``control`` is not a :class:`Control`; a keyword is not a field (with the nearest field names);
        or a field is given both in ``control`` and as a keyword.
    """
    if control is None:
        control = Control()
    elif not isinstance(control, Control):
        raise BayesvmError(f"control must be a bayesvm.Control(...) (or None), got {type(control).__name__}")
    unknown = [name for name in options if name not in CONTROL_FIELDS]
    if unknown:
        said = "; ".join(f"{name!r}{_unknown_argument_hint(name)}" for name in unknown)
        raise BayesvmError(
            f"bsvm() got unknown argument(s) {said}; engine settings are the fields of bayesvm.Control: "
            f"{', '.join(CONTROL_FIELDS)}"
        )
    defaults = asdict(Control())
    twice = [
        name
        for name in options
        if not _same(getattr(control, name), defaults[name]) and not _same(getattr(control, name), options[name])
    ]
    if twice:
        raise BayesvmError(f"{twice} given both in control= and as keywords: give each once")
    return replace(control, **options) if options else control


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    return type(a) is type(b) and a == b
