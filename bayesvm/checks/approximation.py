"""After a VB fit: the PSIS check of q against the posterior it approximates, run by ``bsvm()`` itself.

``summary()`` has always run the check (:mod:`bayesvm.results.vb_check`), but a user who reads ``fit.fixef`` or
predicts without printing the summary was never told when it failed: R's geepack ``muscatine`` (``obese ~ gender + age
+ I(age**2) + (1 | id)``, 9,856 rows) fits without a word while the check's k-hat is 1.5 and the intercept is 2
posterior SDs from a long Gibbs run's.  As rstanarm runs PSIS after its variational fits, ``bsvm()`` runs the check at
the end of every VB fit it covers (normal priors, no imputation, training rows in memory, up to
:data:`~bayesvm.results.vb_check.AUTO_CHECK_MAX_VALUES` rows x draws) and warns once when k-hat exceeds 0.7 or the
importance weights move a reported mean by half of q's SD or more, naming the parameter
(:func:`bayesvm.results.vb_check.check_warning`).  The result is kept, so ``summary()`` prints the same verdict
without running it again.

Not run where the verdict would mislead: after an identifiability problem that leaves the posterior shaped by the
prior (``summary()`` says so instead), or an accurate fit that did not converge (its own warning says so).
"""

from __future__ import annotations

import warnings

from ..errors import ApproximationWarning, BayesvmError

#: Findings that leave a fitted model identified, so the check's verdict still means what it says
IDENTIFIED_FINDINGS = ("rank", "one_class")


def check_approximation(fit, action: str = "warn") -> None:
    """Run the PSIS check at the end of a VB fit and warn (``"warn"`` or ``"stop"``: the fit exists) when it fails.

    Parameters
    ----------
    fit
        A :class:`bayesvm.results.fit.BSVMFit` whose ``diagnostics`` are set.
    action
        ``Checks.vb_check``: ``"ignore"`` skips the check (``summary()`` then runs it).
    """
    from ..results.vb_check import AUTO_CHECK_DRAWS, check_warning, not_run_by_itself

    if action == "ignore" or fit.posterior.kind not in ("variational", "mixture"):
        return
    if not_run_by_itself(fit) is not None:
        return
    if fit.posterior.kind == "mixture" and not fit.result.converged:
        return
    if any(f.check not in IDENTIFIED_FINDINGS and f.action in ("warn", "stop") for f in fit.diagnostics.findings):
        return
    try:
        check = fit.check_vb(draws=AUTO_CHECK_DRAWS, warn=False)
    except BayesvmError as exc:  # never breaks the fit: summary() says why there is no check
        fit._vb_check = f"no PSIS check: {exc}"
        return
    message = check_warning(check)
    if message is not None:
        warnings.warn(message, ApproximationWarning, stacklevel=3)
