"""What every fitted model is: :class:`Fit`, the base of the linear / mixed view
(:class:`~bayesvm.results.fit.BSVMFit`) and the kernel view (:class:`~bayesvm.results.kernel_fit.KernelFit`).

A fit holds the model, the engine's inputs and the engine's output (:class:`bayesvm.model.output.EngineOutput`).
Everything that needs only the posterior of the decision value ``f`` lives here and works the same for every
model: prediction (classes, calibrated probabilities, the pseudo-likelihood, intervals), the calibration map and
its report, probability changes, convergence facts, saving and the ArviZ export.  A view supplies

* :meth:`Fit._make_posterior`: the posterior summaries of its engine outputs;
* :meth:`Fit._predictive`: the posterior mean and variance of ``f`` at the rows asked for;
* :meth:`Fit.inference_groups`: the posterior (and log-likelihood) groups of the ArviZ export;
* :meth:`Fit.summary` and ``__repr__``.

What only one view has (coefficients and random effects; a kernel's hyperparameters) is defined only there: a
kernel fit has no ``fixef`` attribute rather than one that raises (the ``AttributeError`` for it says where to look
instead).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..arguments import as_flag, decision_threshold
from ..errors import BayesvmError
from ..outofcore import is_dask_frame

PREDICT_KINDS = ("class", "prob", "pseudo", "link")
NEW_LEVELS = ("integrate", "zero")
#: R's ``predict(type=)`` values (lme4, glm) and the ``kind`` that gives the same quantity
R_PREDICT_TYPES = {"response": "prob", "link": "link", "class": "class", "prob": "prob", "probs": "prob"}


def checked_kind(kind: object, kinds: tuple[str, ...], r_type: object = None, what: str = "") -> str:
    """``kind`` if it is one of ``kinds``, else a :class:`~bayesvm.errors.BayesvmError` that names the choices and,
    for R's spellings (``type="response"``, ``kind="response"``), the ``kind`` that gives the same quantity."""
    if r_type is not None:
        same = R_PREDICT_TYPES.get(r_type) if isinstance(r_type, str) else None
        hint = f": R's type={r_type!r} is kind={same!r}" if same in kinds else f"; kind is one of {kinds}"
        raise BayesvmError(f"predict() chooses what it predicts by kind=, not R's type={hint}")
    if kind not in kinds:
        same = R_PREDICT_TYPES.get(kind) if isinstance(kind, str) else None
        hint = f" (R's type={kind!r} is kind={same!r})" if same in kinds else ""
        raise BayesvmError(f"kind must be one of {kinds}{what}, got {kind!r}{hint}")
    return kind


@dataclass(eq=False)
class Fit(ABC):
    """A fitted model (every ``bsvm()`` and ``pcvm()`` result).

    Attributes
    ----------
    model
        The model (design, priors, standardisation; the kernel of a kernel fit).
    problem
        The engine's inputs (training rows).
    method
        Engine name, e.g. ``"vb"``.
    result
        The engine's output (:class:`bayesvm.model.output.EngineOutput`).
    data_name
        How the data were referred to (for ``summary()``).
    call
        How the fit was made (:class:`bayesvm.results.crossfit.FitCall`: the formula, data and options), for
        cross-fitting and refits; None for a fit built directly.
    """

    model: object
    problem: object
    method: str
    result: object
    data_name: str = "data"
    tol: float = 1e-8
    #: how the fit was made (:class:`bayesvm.results.crossfit.FitCall`), given by ``bsvm()`` / ``pcvm()`` when they
    #: build the fit (None: a fit built directly)
    call: object = field(default=None, kw_only=True, repr=False, compare=False)
    #: the posterior summaries of ``result`` (:meth:`_make_posterior`), made when the fit is built
    posterior: object = field(init=False, repr=False, compare=False, default=None)

    # defaults for fits restored from files written before these attributes existed
    _calibration = None
    #: what :meth:`log_likelihood` is (the ArviZ export's ``log_likelihood`` group says it)
    likelihood_note = "normalised hinge pseudo-likelihood, not a true likelihood"

    def __post_init__(self) -> None:
        self.posterior = self._make_posterior()
        #: the probability map, learned on first use (:meth:`calibrate`)
        self._calibration = None

    # ----- what a view supplies -------------------------------------------------------
    @abstractmethod
    def _make_posterior(self):
        """The posterior summaries of the engine's output (``kind``, ``link`` ...)."""

    @abstractmethod
    def _predictive(self, newdata, include_random: bool, new_levels: str):
        """``(mean, var, law, rows, extra)``: the posterior mean and variance of ``f`` at the rows, the law of the
        variance that unseen group levels add (``None`` when there is none), and what :meth:`_pseudo` needs."""

    def _link_mean(self, newdata, include_random: bool) -> np.ndarray:
        """The posterior mean of ``f`` at the rows alone (classes and ``kind="link"`` need nothing else)."""
        return self._predictive(newdata, include_random, "zero")[0]

    @abstractmethod
    def inference_groups(self, draws: int, seed: int | None, log_likelihood: bool) -> dict:
        """The ArviZ groups that depend on the model: ``posterior`` and, if asked, ``log_likelihood``."""

    @abstractmethod
    def summary(self, level: float = 0.95, detail: bool = False):
        """The printed summary; ``str()`` of the returned object prints it (``detail``: also the engine's report)."""

    def _pseudo(self, mean, var, law, rows, extra) -> np.ndarray:
        """The normalised pseudo-likelihood averaged over ``q(f) = N(mean, var)`` (``kind="pseudo"``)."""
        from .prediction import gaussian_average_probability

        return gaussian_average_probability(mean, var)

    # ----- convergence ---------------------------------------------------------------
    @property
    def lower_bound(self) -> np.ndarray:
        """Lower bound ``log p(y; q)`` after every sweep (VB; empty for other engines)."""
        return self.result.lower_bound

    @property
    def converged(self) -> bool:
        """The engine's stopping rule was met."""
        return bool(self.result.converged)

    @property
    def n_iter(self) -> int:
        """Iterations (sweeps, EM steps, SVI steps or draws per chain) the engine ran."""
        return int(self.result.n_iter)

    @property
    def elapsed(self) -> float:
        """Seconds spent in the engine."""
        return self.result.elapsed

    @property
    def objective(self) -> np.ndarray:
        """EM / ECME: ``log p(theta, components | y)`` up to a constant, per iteration (empty otherwise)."""
        return self.result.objective

    @property
    def formula(self) -> str:
        return self.model.design.parsed.formula

    @property
    def nobs(self) -> int:
        """The rows the fit used (rows dropped for missing values left out), as statsmodels' ``nobs`` and lme4's
        ``nobs()``; ``summary()``'s "Number of obs"."""
        return int(self.model.design.n)

    # ----- prediction ----------------------------------------------------------------
    def predict(
        self,
        newdata: pd.DataFrame | None = None,
        kind: str = "class",
        include_random: bool = True,
        new_levels: str = "integrate",
        threshold: float | None = None,
        *,
        type: str | None = None,  # (R's name, refused with the kind that gives the same)
    ) -> pd.Series:
        """Predict new (or the training) rows: a Series on ``newdata``'s index (the training rows' index for
        ``newdata=None``), so that it aligns with the data as statsmodels' and pandas' results do.

        Parameters
        ----------
        newdata
            Rows to predict; ``None`` for the training rows.  A dask data frame gives a dask series, computed
            partition by partition where dask runs (the probability map is learned first, once).
        kind
            ``"class"``: the response's own class labels, the sign of the posterior mean of ``f``;
            ``"prob"``: the calibrated posterior predictive ``P(y = positive)``
            (:mod:`bayesvm.results.calibration`: a probit map on ``f`` learned by 5-fold cross-fitting the
            first time it is needed, see :meth:`calibrate`); ``"pseudo"``: the raw normalised
            pseudo-likelihood ``expit(2 (1 + f)_+ - 2 (1 - f)_+)`` averaged over the posterior of ``f``
            (:mod:`bayesvm.results.prediction`; steep and overconfident, kept for comparison; a PCVM's own
            probit likelihood for a PCVM fit); ``"link"``: posterior mean of ``f``.  Without class weights
            ``class == (prob > 0.5)``; with them (``bsvm(class_weight=...)``) the classes follow the weighted fit's
            sign of ``f`` and the probabilities are the data's, so they part where the weights move the decision.
        include_random
            False predicts at population level (all random effects 0).  No effect without random effects.
        new_levels
            For a group level the fit never saw: ``"integrate"`` (default) integrates its random effect over
            the fitted distribution of the term (``u ~ N(0, Sigma)``, ``Sigma`` over its posterior; bambi's
            ``sample_new_groups``): the probability for a new patient.  ``"zero"`` sets it to 0: the
            probability for a typical patient (lme4's ``allow.new.levels`` prediction).  Classes and
            ``"link"`` are the same under both (the random effect has mean 0).
        threshold
            With ``kind="class"``: the positive class where the calibrated ``P(y = positive)`` is at least this
            (in (0, 1); scikit-learn's ``FixedThresholdClassifier``), e.g. the data's share of the positive class to
            weigh both classes equally; ``None`` (default) is the sign of ``f``.
        type
            R's name for ``kind`` (``predict(fit, type="response")``): refused, naming the ``kind`` that gives the
            same (``"response"`` is ``"prob"``), so that a call written for R never predicts something else.
        """
        checked_kind(kind, PREDICT_KINDS, type)
        if new_levels not in NEW_LEVELS:
            raise BayesvmError(f"new_levels must be one of {NEW_LEVELS}, got {new_levels!r}")
        include_random = as_flag(include_random, "include_random")
        if threshold is not None:
            threshold = decision_threshold(threshold, kind)
        if is_dask_frame(newdata):  # a dask series, one task per partition (the probability map learned first)
            if kind == "prob" or threshold is not None:
                self.calibration_map()
            labels = self.model.design.response.decode(np.array([1.0]))
            dtype = labels.dtype if kind == "class" else np.float64
            return newdata.map_partitions(
                lambda part: self.predict(
                    part, kind=kind, include_random=include_random, new_levels=new_levels, threshold=threshold
                ),
                meta=(kind, dtype),
            )
        if threshold is None and kind in ("link", "class"):  # the mean of f alone
            mean = self._link_mean(newdata, include_random)
            values = mean if kind == "link" else self.model.design.response.decode(np.where(mean > 0, 1.0, -1.0))
            return pd.Series(values, index=self._row_labels(newdata), name=kind)
        mean, var, law, rows, extra = self._predictive(newdata, include_random, new_levels)
        if threshold is not None:
            from .calibration import calibrated_probability

            probability = calibrated_probability(self.calibration_map(), mean, var, law)
            values = self.model.design.response.decode(np.where(probability >= threshold, 1.0, -1.0))
        elif kind == "pseudo":
            values = self._pseudo(mean, var, law, rows, extra)
        else:
            from .calibration import calibrated_probability

            values = calibrated_probability(self.calibration_map(), mean, var, law)
        return pd.Series(values, index=self._row_labels(newdata), name=kind)

    def predict_interval(
        self,
        newdata: pd.DataFrame | None = None,
        level: float = 0.95,
        include_random: bool = True,
        new_levels: str = "integrate",
    ) -> pd.DataFrame:
        """Posterior mean, SD and central credible interval of the decision value ``f`` (for a new group level
        with ``new_levels="integrate"``, the SD includes ``E[z' Sigma z]`` and the interval is normal)."""
        from scipy.special import ndtri

        from ..arguments import as_level
        from .new_levels import expected_new_variance

        if new_levels not in NEW_LEVELS:
            raise BayesvmError(f"new_levels must be one of {NEW_LEVELS}, got {new_levels!r}")
        include_random = as_flag(include_random, "include_random")
        if is_dask_frame(newdata):  # a dask frame, one task per partition
            meta = pd.DataFrame({name: pd.Series(dtype=float) for name in ("mean", "sd", "lower", "upper")})
            return newdata.map_partitions(
                lambda part: self.predict_interval(
                    part, level=level, include_random=include_random, new_levels=new_levels
                ),
                meta=meta,
            )
        mean, var, law, _, _ = self._predictive(newdata, include_random, new_levels)
        sd = np.sqrt(var + expected_new_variance(law, mean.size))
        z = ndtri(0.5 + as_level(level) / 2.0)
        return pd.DataFrame(
            {"mean": mean, "sd": sd, "lower": mean - z * sd, "upper": mean + z * sd}, index=self._row_labels(newdata)
        )

    def link_moments(self, newdata: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``f`` for new rows, and ``E[s]``, the variance that random effects of
        group levels the fit never saw add (0 for seen levels); used by cross-fitting."""
        from .new_levels import expected_new_variance

        mean, var, law, _, _ = self._predictive(newdata, True, "integrate")
        return mean, var, expected_new_variance(law, mean.size)

    def probability_change(
        self, column: str, values: tuple | None = None, newdata: pd.DataFrame | None = None, by: float = 1.0
    ) -> pd.DataFrame:
        """Average change of the calibrated ``P(y = positive)`` when ``column`` changes: what to report instead
        of an odds ratio (``f`` is on the SVM decision scale).  See :func:`bayesvm.results.effects.probability_change`."""
        from .effects import probability_change

        return probability_change(self, column, values=values, newdata=newdata, by=by)

    def _row_labels(self, newdata) -> pd.Index:
        """The index of ``newdata`` (or of the training rows), so that predictions align with the data."""
        if newdata is None:
            return self.model.design.row_index
        from ..formula.frames import as_frame

        return as_frame(newdata, "newdata").index

    # ----- calibration ---------------------------------------------------------------
    @property
    def learned_calibration(self):
        """The probability map if it has been learned (:meth:`calibrate`), else ``None``; learns nothing."""
        return self._calibration

    def calibration_map(self):
        """The probability map (:class:`bayesvm.results.calibration.CalibrationMap`), learned on first use by
        :meth:`calibrate` with its defaults."""
        if self._calibration is None:
            self.calibrate()
        return self._calibration

    def calibrate(
        self, newdata: pd.DataFrame | None = None, folds: int = 5, seed: int | None = None, method: str = "auto"
    ):
        """Learn the map from the posterior of ``f`` to ``P(y = positive)`` (:mod:`bayesvm.results.calibration`).

        Parameters
        ----------
        newdata
            ``None`` (default): out-of-sample predictions of the training rows: for a fit without random effects
            their leave-one-out moments from the fit's own draws (:mod:`bayesvm.results.loo`, PSIS-LOO: no refit);
            otherwise cross-fitting, the model refitted on ``folds - 1`` folds of the training rows predicts the
            remaining fold (:mod:`bayesvm.results.crossfit`; costs ``folds`` fits).  A frame with the response:
            held-out rows the fit never saw (cheaper for large or out-of-core data).
        folds
            Folds of the cross-fitting (and of the calibration report's scoring).
        seed
            Seed of the fold assignment and the fold fits (default: the fit's seed, or 0).
        method
            Without ``newdata``: ``"auto"`` (PSIS-LOO where it serves: a fit without random effects whose rows'
            leave-one-out moments rest on enough draws, :data:`bayesvm.results.loo.MAX_THIN_SHARE`; else
            cross-fitting), ``"loo"`` or ``"crossfit"``.

        Returns
        -------
        CalibrationMap
            Also kept by the fit (and saved with it): later probabilities use it.
        """
        from ..arguments import as_count, as_seed
        from . import loo
        from .calibration import fit_calibration_map

        folds = as_count(folds, "folds", low=2)
        seed = as_seed(seed)
        if method not in ("auto", "loo", "crossfit"):
            raise BayesvmError(f"method must be 'auto', 'loo' or 'crossfit', got {method!r}")
        why = loo.applies(self)
        if method == "loo" and why is not None:
            raise BayesvmError(f"PSIS leave-one-out cannot calibrate this fit ({why}); use method='crossfit'")
        if newdata is None and method != "crossfit" and why is None:
            predictions = loo.loo_predictions(self, seed=0 if seed is None else seed, folds=folds)
            if method == "loo" or loo.thin_share(predictions) <= loo.MAX_THIN_SHARE:
                self._calibration = fit_calibration_map(self._with_class_weights(predictions), "PSIS leave-one-out")
                return self._calibration
        if newdata is None:
            from .crossfit import CrossFitError, cross_fitted_predictions

            try:
                predictions = cross_fitted_predictions(self, folds=folds, seed=seed)
            except CrossFitError as exc:
                from .calibration import prior_map

                warnings.warn(
                    f"{exc}: probabilities use the calibration prior's map (a unit probit link on f), not one "
                    "learned from these data; fit.calibrate(newdata=frame) learns one from held-out rows",
                    UserWarning,
                    stacklevel=3,
                )
                weights = self._class_weights
                pair = None if weights is None else (weights.negative, weights.positive)  # (Bayes' rule back)
                self._calibration = prior_map(f"prior only: {exc}", class_weights=pair)
                return self._calibration
            source = f"{predictions['fold'].max() + 1}-fold cross-fitted"
            if "alignment" in predictions.attrs:
                source += f" ({predictions.attrs['alignment']})"
            cmap = fit_calibration_map(self._with_class_weights(predictions), source)
        else:
            rows, dropped = self._scored_rows(newdata)
            held_out = self._with_class_weights(self._held_out_predictions(rows))
            cmap = fit_calibration_map(held_out, "held-out" + _dropped_note(dropped))
        self._calibration = cmap
        return cmap

    @property
    def _class_weights(self):
        """The fit's :class:`bayesvm.model.class_weights.ClassWeights`, or None (no weights, or a model without them)."""
        return getattr(getattr(self, "model", None), "class_weights", None)

    def _with_class_weights(self, predictions: pd.DataFrame) -> pd.DataFrame:
        """The predictions with each row's class weight (column ``weight``) where the fit weighs its classes, so that
        the map is learned on the weighted classes (:mod:`bayesvm.results.calibration`, class weights)."""
        weights = self._class_weights
        if weights is None:
            return predictions
        return predictions.assign(weight=weights.rows(predictions["y"].to_numpy(float)))

    def _scored_rows(self, newdata: pd.DataFrame) -> tuple[pd.DataFrame, int]:
        """``newdata`` for scoring or calibrating, and how many rows were left out: a ``missing="drop"`` fit
        leaves out rows missing a value (the response included) of a variable its formula uses, as it did when
        fitting; other fits take every row (``predict`` names any missing value)."""
        from ..formula.frames import as_frame
        from .crossfit import used_columns

        newdata = as_frame(newdata, "newdata")
        call = getattr(self, "call", None)
        if call is None or call.options.get("missing") != "drop":
            return newdata, 0
        names = " ".join(str(name) for name in getattr(self.model.design, "x_names", ()))
        columns = used_columns(newdata.columns, f"{call.formula} {names}")
        complete = newdata[columns].notna().all(axis=1).to_numpy()
        return newdata.loc[complete], int(np.sum(~complete))

    def _held_out_predictions(self, newdata: pd.DataFrame) -> pd.DataFrame:
        """``mean, var, new_var, y, fold`` for rows with a known response."""
        from .new_levels import expected_new_variance

        y = self.model.design.response_of(newdata)
        mean, var, law, _, _ = self._predictive(newdata, True, "integrate")
        return pd.DataFrame(
            {"mean": mean, "var": var, "new_var": expected_new_variance(law, mean.size), "y": y, "fold": -1}
        )

    def calibration(self, newdata: pd.DataFrame | None = None, bins: int = 10):
        """How well the probabilities match outcomes: log loss, Brier score, ECE and a reliability table.

        ``newdata=None`` reports the cross-validated performance on the training rows: each fold's
        out-of-fold predictions through a map learned from the *other* folds' predictions (so the map never
        sees the rows it is scored on).  With ``newdata`` (holding the response) it reports on those rows.
        Both the calibrated (``prob``) and the raw pseudo-likelihood (``pseudo``) probabilities are scored.
        """
        from ..arguments import as_count
        from .calibration import (
            CalibrationReport,
            calibrated_probability,
            fit_calibration_map,
            probability_scores,
            reliability_table,
        )
        from .prediction import gaussian_average_probability

        bins = as_count(bins, "bins", low=2)
        if newdata is not None:
            newdata, dropped = self._scored_rows(newdata)
            y = self.model.design.response_of(newdata)
            prob = self.predict(newdata, kind="prob").to_numpy()
            pseudo = self.predict(newdata, kind="pseudo").to_numpy()
            source = "held-out" + _dropped_note(dropped)
        else:
            cmap = self.calibration_map()
            frame = cmap.predictions
            if frame is None or (frame["fold"] < 0).all():
                raise BayesvmError("this fit was calibrated on held-out rows: pass them as newdata to report on them")
            y = frame["y"].to_numpy(float)
            prob = np.empty(y.size)
            for k in np.unique(frame["fold"]):
                rows = (frame["fold"] == k).to_numpy()
                other = fit_calibration_map(frame[~rows], "cross-fitted")
                prob[rows] = calibrated_probability(
                    other, frame["mean"].to_numpy()[rows], frame["var"].to_numpy()[rows] + 0.0,
                    None if not frame["new_var"].to_numpy()[rows].any()
                    else (frame["new_var"].to_numpy()[rows, None], np.ones(1)),
                )  # fmt: skip
            pseudo = gaussian_average_probability(
                frame["mean"].to_numpy(float), frame["var"].to_numpy(float) + frame["new_var"].to_numpy(float)
            )
            source = f"cross-validated, {int(frame['fold'].max()) + 1} folds"
        metrics = pd.DataFrame(
            [probability_scores(y, prob, bins), probability_scores(y, pseudo, bins)], index=["prob", "pseudo"]
        )
        return CalibrationReport(source=source, metrics=metrics, reliability=reliability_table(y, prob, bins))

    def plot_calibration(self, newdata: pd.DataFrame | None = None, bins: int = 10, ax=None):
        """Reliability diagram of the calibrated probabilities (:func:`bayesvm.plots.plot_calibration`)."""
        from ..plots import plot_calibration

        return plot_calibration(self, newdata=newdata, bins=bins, ax=ax)

    # ----- storage and export ----------------------------------------------------------
    def save(self, path, key: bytes | str | None = None):
        """Write the whole fit to ``path`` as data (a checksummed zip of JSON and ``.npy`` arrays, written
        atomically; see :mod:`bayesvm.results.storage`); ``bayesvm.load`` reads it without running any code.  With
        ``key``, the file is also signed (HMAC-SHA256), and ``bayesvm.load(path, key=key)`` refuses it if anyone
        without the key changed it."""
        from .storage import save_fit

        call = self.call
        if call is None or call.data is None or isinstance(call.data, pd.DataFrame):
            return save_fit(self, path, key)
        # out-of-core data are a lazy graph, not data: the file keeps the call without them (a loaded fit keeps
        # its learned probability map; re-calibrating it needs held-out rows).  A shallow copy carries the learned
        # map and leaves this fit as it is.
        import copy
        from dataclasses import replace

        stored = copy.copy(self)
        stored.call = replace(call, data=None)
        return save_fit(stored, path, key)

    def to_inference_data(self, draws: int = 1000, seed: int | None = 0, log_likelihood: bool = True):
        """ArviZ object (:mod:`bayesvm.results.arviz`): ``posterior`` (VB: ``draws`` draws from q; Gibbs: the
        chains), ``observed_data``, ``log_likelihood`` (each row's normalised pseudo-likelihood, for ``az.loo``),
        ``sample_stats`` (Gibbs) and ``lower_bound`` (VB)."""
        from .arviz import fit_to_datasets, make_container

        return make_container(fit_to_datasets(self, draws=draws, seed=seed, log_likelihood=log_likelihood))

    def log_likelihood(self, y: np.ndarray, f: np.ndarray) -> np.ndarray:
        """Normalised hinge pseudo-likelihood ``log p(y | f)`` (``y`` in {-1, +1}; broadcast over draws of ``f``)."""
        from scipy.special import log_expit

        log_odds = 2.0 * np.maximum(1.0 + f, 0.0) - 2.0 * np.maximum(1.0 - f, 0.0)
        return log_expit(y * log_odds)


def _dropped_note(dropped: int) -> str:
    """What a report's source adds for held-out rows left out for missing values (``Fit._scored_rows``)."""
    return f"; {dropped} row(s) with missing values left out (missing='drop')" if dropped else ""
