"""The fitted function of a ``gp()`` term, with its credible band (mgcv's ``plot.gam``, brms's
``conditional_effects`` for one smooth).

``g(x) = phi(x)' v`` (:mod:`bayesvm.formula.gp_terms`) is linear in the term's coefficients ``v``, so its
posterior at any inputs is the posterior of a linear predictor whose only non-zero columns are the term's
basis: the posterior's own ``link`` gives its mean and variance exactly (Gaussian q, the accurate fit's
mixture, or the Gibbs draws).  ``g`` is centred over the training rows (the intercept carries the level).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.special import ndtri

from ..arguments import as_level
from ..errors import BayesvmError, DataError
from ..formula.frames import as_frame


def _term_index(design, term: str | None) -> int:
    labels = [t.label for t in design.gp_terms]
    if not labels:
        raise BayesvmError("the formula has no gp() term")
    if term is None:
        if len(labels) > 1:
            raise BayesvmError(f"the formula has several gp() terms: name one of {labels}")
        return 0
    for i, t in enumerate(design.gp_terms):
        if term in (t.label, t.label.replace(" ", ""), *((t.spec.variables[0],) if len(t.spec.variables) == 1 else ())):
            return i
    raise BayesvmError(f"{term!r} is not a gp() term of the formula; terms: {labels}")


def _grid(design, i: int, newdata, points: int) -> pd.DataFrame:
    term = design.gp_terms[i]
    names = list(term.spec.variables)
    if newdata is not None:
        frame = as_frame(newdata, "newdata")
        absent = [v for v in names if v not in frame.columns]
        if absent:
            raise DataError(f"newdata lacks the input(s) {absent} of {term.label}")
        frame = frame[names]
        values = frame.to_numpy(dtype=float, na_value=np.nan)
        if not np.isfinite(values).all():
            rows = frame.index[~np.isfinite(values).all(axis=1)][:5].tolist()
            raise DataError(f"newdata has missing or non-finite inputs of {term.label} in rows {rows}")
        return frame
    if len(names) > 1:
        raise BayesvmError(f"{term.label} has {len(names)} inputs: pass newdata with the input values to evaluate")
    if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or points < 2:
        raise BayesvmError(f"points must be an integer >= 2, got {points!r}")
    low, high = (
        term.center + term.scale * term.locations.min(axis=0),
        term.center + term.scale * term.locations.max(axis=0),
    )
    return pd.DataFrame({names[0]: np.linspace(float(low[0]), float(high[0]), int(points))})


def gp_effect(fit, term: str | None = None, newdata=None, points: int = 100, level: float = 0.95) -> pd.DataFrame:
    """Posterior mean, SD and central credible band of a ``gp()`` term's function ``g``.

    Parameters
    ----------
    fit
        A linear-model fit whose formula has a ``gp()`` term.
    term
        Which term (its label ``"gp(age)"``, or the input's name for a one-input term); ``None`` for the only one.
    newdata
        Input values at which to evaluate ``g``; default: ``points`` values spanning the inducing locations
        (one-input terms).
    level
        Credible level of the band (normal for the variational fits, whose ``g`` is Gaussian or a mixture).

    Returns
    -------
    DataFrame with the inputs and ``mean``, ``sd``, ``lower``, ``upper`` (decision-function scale).
    """
    design, model = fit.model.design, fit.model
    i = _term_index(design, term)
    gp = design.gp_terms[i]
    frame = _grid(design, i, newdata, points)
    basis = gp.basis(frame.to_numpy(dtype=float))
    width = fit.problem.D.shape[1]
    start = model.gp_offsets()[i]
    D = np.zeros((basis.shape[0], width))
    D[:, start : start + gp.n_basis] = basis
    if sp.issparse(fit.problem.D):
        D = sp.csr_matrix(D)
    mean, var = fit.posterior.link(D, None, None)
    sd = np.sqrt(np.maximum(var, 0.0))
    z = ndtri(0.5 + as_level(level) / 2.0)
    out = frame.reset_index(drop=True).copy()
    out["mean"], out["sd"], out["lower"], out["upper"] = mean, sd, mean - z * sd, mean + z * sd
    return out
