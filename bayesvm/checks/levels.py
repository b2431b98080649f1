"""Random-effect identifiability: lme4's level checks, and classes the random effects alone separate.

lme4 (``checkNlevels``, ``check.nobs.vs.nlev``, ``check.nobs.vs.nRE``; defaults in ``glmerControl``):

- a grouping factor needs at least 2 levels (``stop``) and should have at least 5 to estimate a
  variance (``warn``);
- a term needs fewer levels than rows (``nobs <= nlev``: every level has about one row, so the
  random effects are confounded with the rows themselves; ``stop``);
- the random effects together need fewer coefficients than rows (``nobs <= nRE``; ``stop``).

Beyond lme4, for a hinge (or logistic) likelihood: the rows of a level whose outcomes are all one class
are fitted perfectly by that level's effect as its variance grows, so only the other levels
("informative" ones, with both classes) pin the variance down.  The separation test on ``[X, Z]`` finds
the rows the random effects isolate; too few informative levels, or nearly every row isolated, means
the variance is determined by its prior.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .findings import Finding
from .level_overlap import one_factor_separation
from .separation import detect_separation

#: The separation test on ``[X, Z]`` by a linear programme runs up to this many rows and random-effect columns (one
#: factor of one column is settled by its structure where it overlaps beyond its one-class levels,
#: :mod:`bayesvm.checks.level_overlap`).
RE_SEPARATION_MAX_ROWS = 20_000
RE_SEPARATION_MAX_COLUMNS = 5_000
#: ... and by the structure up to this many rows (a Newton fit of a few passes over the rows; past it the default is
#: mean-field VB, whose fit costs about as much as the test; the levels of one class are still counted at any size,
#: :func:`one_class_levels`).
RE_SEPARATION_STRUCTURED_MAX_ROWS = 200_000
#: Fewer informative levels than this (levels holding both classes) leave a variance weakly identified.
MIN_INFORMATIVE_LEVELS = 5
#: A share of rows isolated by the random effects at or above this is reported as a warning.
ISOLATED_SHARE = 0.9


def level_findings(design, actions) -> list[Finding]:
    """lme4's level-count checks for every random-effect term (``actions``: a :class:`~bayesvm.checks.Checks`)."""
    findings = []
    n = design.n
    n_re = sum(term.n_levels * term.k for term in design.re_terms)
    seen = set()
    for term in design.re_terms:
        if term.group in seen:
            continue
        seen.add(term.group)
        J = term.n_levels
        name = str(term.bar)
        if J < 2:
            findings.append(
                Finding(
                    "nlevels",
                    "stop",
                    f"grouping factor {term.group!r} has {J} level; a random effect needs at least 2 (and 5 or more to estimate its variance)",
                    (term.group,),
                )
            )
        elif J < 5:
            findings.append(
                Finding(
                    "nlevels",
                    actions.nlevels,
                    f"grouping factor {term.group!r} has only {J} levels: too few to estimate a variance (lme4 asks for 5 or more); consider it as a fixed effect",
                    (term.group,),
                )
            )
        if n <= J:
            findings.append(
                Finding(
                    "nobs_vs_nlev",
                    actions.nobs_vs_nlev,
                    f"{name}: {J:,} levels on {n:,} rows: every level has about one row, so its random effect is confounded with the row itself and the variance is not identified; remove the term, or group more coarsely",
                    (term.group,),
                )
            )
        else:
            counts = design.level_counts(term)[0]
            single = int((counts == 1).sum())
            if single > 0.5 * J:
                findings.append(
                    Finding(
                        "nobs_vs_nlev",
                        "warn" if actions.nobs_vs_nlev != "ignore" else "ignore",
                        f"{name}: {single:,} of its {J:,} levels have a single row ({n:,} rows in all): those random effects are confounded with their rows and the variance is weakly identified",
                        (term.group,),
                    )
                )
    if design.re_terms and n <= n_re:
        findings.append(
            Finding(
                "nobs_vs_nRE",
                actions.nobs_vs_nre,
                f"the random effects have {n_re:,} coefficients for {n:,} rows: more random effects than rows cannot be identified",
                tuple(t.group for t in design.re_terms),
            )
        )
    return findings


#: Random combinations of a term's effects whose predictor is tested against the span of the fixed-effect columns
SPAN_PROBES = 2
#: A probe's predictor counts as inside that span when the least-squares residual keeps less than this share of its norm
SPAN_TOLERANCE = 1e-8
#: Out of core the span is tested from ``X'X``, ``X'p`` and ``p'p`` summed over the partitions (the normal equations,
#: whose rounding squares the condition number): a probe counts as inside where the squared residual keeps less than
#: this share of ``p'p`` (a residual below 1e-4 of the probe's norm)
SPAN_GRAM_TOLERANCE = 1e-8
#: Rows x fixed columns^2 up to which the span is tested (about a second; a fit's every sweep costs as much)
SPAN_MAX_WORK = 2e9


def span_probe_effects(terms, p: int, n: int) -> dict[int, np.ndarray]:
    """Random effects ``b (levels, k, SPAN_PROBES)`` for each random-effect term (by position) whose span is tested:
    where the ``p`` fixed columns are at least as many as the term's coefficients (else they cannot contain them) and
    ``n p^2`` stays within :data:`SPAN_MAX_WORK`.  Drawn in term order from one seed, so that every pass over the
    data (in memory, or each partition out of core) uses the same ones."""
    rng = np.random.default_rng(0)
    return {
        index: rng.standard_normal((term.n_levels, term.k, SPAN_PROBES))
        for index, term in enumerate(terms)
        if p >= term.n_levels * term.k and float(n) * p**2 <= SPAN_MAX_WORK
    }


def probe_predictors(codes: np.ndarray, values: np.ndarray, effects: np.ndarray) -> np.ndarray:
    """Each row's ``z_i' b_{j[i]}`` for the probes' effects ``(levels, k, probes)``: ``(rows, probes)``; rows of no
    level (code -1) give 0."""
    inside = codes >= 0
    probes = np.zeros((codes.size, effects.shape[2]))
    probes[inside] = np.einsum("nk,nks->ns", values[inside], effects[codes[inside]])
    return probes


def span_products(X: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(X'X, X'P, diag(P'P))`` of some rows: summed over partitions, what :func:`gram_residual_shares` reads."""
    return X.T @ X, X.T @ probes, np.einsum("ns,ns->s", probes, probes)


def gram_residual_shares(xx: np.ndarray, xp: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Each probe's squared least-squares residual on ``X`` as a share of its squared norm, from the cross-products:
    ``(p'p - p'X (X'X)^+ X'p) / p'p``, with ``X'X`` scaled to unit diagonal and its pseudo-inverse taken over the
    eigenvalues above ``1e-12`` of the largest (out-of-core designs keep aliased columns).  A probe of no rows gives 1."""
    scale = np.sqrt(np.diag(xx))
    scale = np.where(scale > 0, scale, 1.0)
    values, vectors = np.linalg.eigh(xx / np.outer(scale, scale))
    kept = values > max(values.max(initial=0.0), 0.0) * 1e-12
    projected = vectors[:, kept].T @ (xp / scale[:, None])
    explained = np.sum(projected**2 / values[kept, None], axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pp > 0, np.maximum(pp - explained, 0.0) / pp, 1.0)


def fixed_span_findings(design, actions) -> list[Finding]:
    """Random-effect terms whose every effect the fixed effects can also express (``y ~ C(g) + (1 | g)``): each
    level's random effect and the fixed effects enter the predictor only through their sum, so the term's variance is
    set by its prior and the split of each level's effect by the two priors.

    Tested for the terms of :func:`span_probe_effects`: ``Z b`` for :data:`SPAN_PROBES` random ``b`` is regressed on
    ``X`` (least squares, the cost of one ``X' X``); a residual below :data:`SPAN_TOLERANCE` of its norm for every
    probe means the term lies in the span of ``X`` (a term outside it leaves a residual almost surely).  Out of core
    (``design.span_products``: the cross-products the data's pass summed, :func:`span_products`) the residual comes
    from the normal equations, below :data:`SPAN_GRAM_TOLERANCE` of the squared norm."""
    findings = []
    X = design.X
    in_memory = X.shape[0] == design.n
    streamed = getattr(design, "span_products", None) or {}
    for index, effects in span_probe_effects(design.re_terms, X.shape[1], design.n).items():
        term = design.re_terms[index]
        if in_memory:
            probes = probe_predictors(term.codes, term.values, effects)
            residual = probes - X @ np.linalg.lstsq(X, probes, rcond=None)[0]
            inside = np.all(np.linalg.norm(residual, axis=0) <= SPAN_TOLERANCE * np.linalg.norm(probes, axis=0))
        elif index in streamed:
            inside = np.all(gram_residual_shares(*streamed[index]) <= SPAN_GRAM_TOLERANCE)
        else:
            continue
        if inside:
            findings.append(
                Finding(
                    "nobs_vs_nlev",
                    actions.nobs_vs_nlev,
                    f"{term.bar}: the fixed effects can express every one of its effects (e.g. {term.group!r} is also "
                    "a fixed-effect factor), and each level's random effect enters only through its sum with them: its "
                    f"variance is set by its prior, not the data; remove {term.group!r} from the fixed part or drop "
                    "the term",
                    (term.group,),
                )
            )
    return findings


def one_class_levels(design, actions) -> list[Finding]:
    """Levels whose rows are all one class, from the per-level class counts alone (out-of-core data, where the
    separation test on ``[X, Z]`` cannot run): their random effects are pushed to the prior's tails and only the levels
    with both classes inform the variance; too few of those (:data:`MIN_INFORMATIVE_LEVELS`) leave the variance to
    the prior (``actions.random_separation``), else a note."""
    findings, seen = [], set()
    for term in design.re_terms:
        if term.group in seen or actions.random_separation == "ignore":
            continue
        seen.add(term.group)
        rows, positive = design.level_counts(term)
        mixed = _both_classes(rows, positive)
        one_class = (rows > 0) & ~mixed
        both, one = int(mixed.sum()), int(one_class.sum())
        if one == 0:
            continue
        single_rows = int(rows[one_class].sum())
        text = (
            f"{one:,} of the {term.n_levels:,} levels of {term.group!r} hold one class only ({single_rows:,} of "
            f"{design.n:,} rows): their random effects are pushed to the prior's tails and only the {both:,} levels "
            "with both classes inform the variance"
        )
        if both < MIN_INFORMATIVE_LEVELS:
            text += ", so the variance (and with it every coefficient's scale) is determined by its prior"
            findings.append(Finding("re_separation", actions.random_separation, text, (term.group,)))
        else:
            findings.append(Finding("re_separation", "note", text, (term.group,)))
    return findings


def _untested(text: str, design, actions) -> list[Finding]:
    """The note that the separation test on ``[X, Z]`` did not run (``text`` says why), and, given the checks'
    ``actions``, the levels of one class from their counts (:func:`one_class_levels`)."""
    return [Finding("re_separation", "note", text, ()), *([] if actions is None else one_class_levels(design, actions))]


def random_effect_separation(
    X: np.ndarray, x_names, design, fixed_isolated: np.ndarray | None, actions=None
) -> list[Finding]:
    """Rows the random effects alone isolate (separation test on ``[X, Z]``), per grouping factor; where the data are
    too large for the test, a note that it did not run and, given the checks' ``actions``, the levels of one class
    from their counts (:func:`one_class_levels`)."""
    if not design.re_terms:
        return []
    n, columns = design.n, sum(term.n_levels * term.k for term in design.re_terms)
    structured = len(design.re_terms) == 1 and design.re_terms[0].k == 1 and n <= RE_SEPARATION_STRUCTURED_MAX_ROWS
    programme = n <= RE_SEPARATION_MAX_ROWS and columns <= RE_SEPARATION_MAX_COLUMNS
    if not (structured or programme):
        return _untested(
            f"separation by the random effects not tested ({n:,} rows, {columns:,} random-effect columns; the test runs up to {RE_SEPARATION_MAX_ROWS:,} and {RE_SEPARATION_MAX_COLUMNS:,})",
            design,
            actions,
        )
    names = [*x_names, *design.z_names]
    result = None
    if structured:  # one column per level: settled by the structure
        term = design.re_terms[0]
        dense_X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=float)
        result = one_factor_separation(dense_X, term.codes, term.values[:, 0], design.y, names)
    if result is None and not programme:
        return _untested(
            f"separation by the random effects beyond the levels of one class not settled ({n:,} rows: the "
            f"structure gave no certificate of overlap, and the test runs up to {RE_SEPARATION_MAX_ROWS:,} rows)",
            design,
            actions,
        )
    if result is None:
        Z = design.Z()
        result = detect_separation(sp.hstack([sp.csr_matrix(X), Z], format="csr"), design.y, names, exact_columns=0)
    isolated = result.isolated.copy()
    if fixed_isolated is not None:
        isolated &= ~fixed_isolated
    if not isolated.any():
        return []
    # the grouping factors whose effects the separating direction uses (all of them if it names none)
    used = {name.split("|", 1)[1].split("[", 1)[0] for name in result.columns if "|" in name}
    groups = [g for g in dict.fromkeys(t.group for t in design.re_terms) if not used or g in used]
    informative = {group: _informative_levels(design, group, isolated) for group in groups}
    # a factor none of whose levels is all isolated rows is not what separates them (its levels still inform
    # its variance: too few levels in all is the nlevels check's finding), unless no factor has such levels
    losing = [g for g in groups if informative[g][0] < informative[g][1]]
    share = isolated.mean()
    weak = result.kind == "complete" or share >= ISOLATED_SHARE
    if not losing:  # no level is all isolated rows: they are cells of levels and fixed-effect columns
        names = " and ".join(repr(g) for g in groups)
        text = (
            f"the random effects of {names} together with the fixed effects separate the classes for "
            f"{int(isolated.sum()):,} of {n:,} rows ({_class_counts(design, isolated)}; cells of a level and the "
            "fixed-effect columns whose rows are all one class, though every level has both classes)"
        )
        if weak:
            text += ", so the scale of those effects is determined by the prior: check with method='gibbs'"
        return [Finding("re_separation", "warn" if weak else "note", text, tuple(groups))]
    groups = losing
    parts, sloped = [], False
    for group in groups:
        kept, levels = informative[group]
        weak |= kept < MIN_INFORMATIVE_LEVELS
        of = f" of {group!r}" if len(groups) > 1 else ""
        both = _levels_with_both_classes(design, group)
        slopes = [name for t in design.re_terms if t.group == group for name in t.term_names if name != "(Intercept)"]
        if both > kept and slopes:  # a level's own slope can separate its classes although it has both
            sloped = True
            parts.append(
                f"{kept:,} of {levels:,} levels{of} ({both:,} have both classes, but their own effects, with the slope "
                f"of {', '.join(repr(s) for s in slopes)}, separate the classes of the others)"
            )
        else:
            parts.append(f"{kept:,} of {levels:,} levels{of}")
    names = " and ".join(repr(g) for g in groups)
    text = (
        f"the random effects of {names} alone separate the classes for {int(isolated.sum()):,} of {n:,} rows "
        f"({_class_counts(design, isolated)}; levels whose rows are all one class); only {'; '.join(parts)} "
        + ("inform the variances" if sloped else "have both classes and inform the variance")
    )
    if weak:
        text += (
            ", so the variance (and with it every coefficient's scale) is determined by its prior: check with "
            "method='gibbs' and compare without the term"
        )
    return [Finding("re_separation", "warn" if weak else "note", text, tuple(groups))]


def _informative_levels(design, group: str, isolated: np.ndarray) -> tuple[int, int]:
    """``(levels with a row not isolated, levels)`` of the grouping factor ``group``."""
    term = next(t for t in design.re_terms if t.group == group)
    rows_per_level = np.bincount(term.codes, minlength=term.n_levels)
    isolated_per_level = np.bincount(term.codes, weights=isolated.astype(float), minlength=term.n_levels)
    return int((isolated_per_level < rows_per_level).sum()), int(term.n_levels)


def _levels_with_both_classes(design, group: str) -> int:
    """Levels of the grouping factor ``group`` whose rows hold both classes."""
    term = next(t for t in design.re_terms if t.group == group)
    return int(_both_classes(*design.level_counts(term)).sum())


def _both_classes(rows: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """Which levels (``rows`` and ``positive`` rows of each) hold both classes."""
    return (positive > 0) & (positive < rows)


def _class_counts(design, mask: np.ndarray) -> str:
    pos = int((design.y[mask] > 0).sum())
    neg = int(mask.sum()) - pos
    r = design.response
    return f"{pos:,} of class {r.positive!r}, {neg:,} of class {r.negative!r}"


#: A variance component whose (posterior mean or mode) SD is below this, on the decision function's scale
#: (the margin is 1), or whose correlation is beyond +/- this, is at the boundary (lme4's ``isSingular``).
SINGULAR_SD = 1e-4
SINGULAR_CORRELATION = 0.999


def singular_findings(estimates, action: str = "warn") -> list[Finding]:
    """Variance components at the boundary of their space, as lme4's ``isSingular``: an SD of (about) zero, or a
    correlation of +/-1 (``estimates``: the fit's ``variance_components``)."""
    findings = []
    for est in estimates:
        if est.group == "penalty":
            continue
        cov = np.atleast_2d(est.mean)
        sds = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        zero = [name for name, sd in zip(est.terms, sds) if sd < SINGULAR_SD]
        corr = cov / np.outer(np.where(sds > 0, sds, 1.0), np.where(sds > 0, sds, 1.0))
        pairs = [
            (est.terms[i], est.terms[j], corr[i, j])
            for i in range(len(est.terms)) for j in range(i)
            if abs(corr[i, j]) > SINGULAR_CORRELATION
        ]  # fmt: skip
        if zero or pairs:
            detail = [f"the SD of {name!r} is {sd:.2g}" for name, sd in zip(est.terms, sds) if name in zero]
            detail += [f"the correlation of {a!r} and {b!r} is {r:+.4f}" for a, b, r in pairs]
            findings.append(
                Finding(
                    "singular",
                    action,
                    f"singular fit: for {est.group!r}, {'; '.join(detail)} (a variance component at the boundary of "
                    "its space): the data do not support this random-effect structure; simplify the term, e.g. "
                    f"(1 | {est.group}) or (1 + x || {est.group})",
                    (est.group,),
                )
            )
    return findings
