"""scikit-learn interface: :class:`BayesianSVC`, a drop-in for ``sklearn.svm.SVC(kernel="linear")``.

Needs scikit-learn (``pip install "bayesvm[sklearn]"``).  The penalty is learned by default
(``penalty="learn"``), so there is no ``C`` to search; everything else behaves like a
scikit-learn classifier: arrays or frames in, ``classes_`` in sorted order, ``predict``,
``predict_proba``, ``decision_function``, ``score``, ``Pipeline``, ``GridSearchCV``,
``cross_val_score``.

Multiclass problems are fitted one-vs-rest: one binary Bayesian SVM per class, class ``k``
against the rest.  ``predict_proba`` normalises the per-class posterior predictive
probabilities ``P(y = k | x)`` of the binary fits to sum to one, and ``predict`` takes their
argmax, so the two always agree (with ``class_weight`` the weights act on ``predict`` alone:
:meth:`BayesianSVC.predict`).  ``decision_function`` returns the binary fits' posterior mean linear predictors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .errors import BayesvmError
from .fitting import bsvm


def _warn_findings(findings: pd.DataFrame, category: type[Warning]) -> None:
    """One warning for a fit's findings (a cross-validation prints one per fold, not one per check), naming the binary
    problem and the first finding (``category`` is its warning class); all of them are in the estimator's
    ``findings_``."""
    if findings.empty:
        return
    first = findings.iloc[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    warnings.warn(
        f"BayesianSVC, {first.problem}: {first.message.splitlines()[0]}{more}; every finding is in .findings_",
        category,
        stacklevel=4,
    )


class BayesianSVC(ClassifierMixin, BaseEstimator):
    """Linear Bayesian support vector classifier (Polson & Scott 2011; Luts & Ormerod 2014).

    Parameters
    ----------
    method : {"vb", "gibbs", "em"}
        Inference engine (see :func:`bayesvm.bsvm`).
    penalty : "learn", float or None
        ``"learn"`` learns the penalty (slopes share ``sigma^2 ~ IG``); a float ``alpha`` is the
        SVM objective ``sum hinge + alpha ||beta||^2``, i.e. ``SVC(C=1/(2 alpha))``.
    prior : None or a :mod:`bayesvm.priors` selection prior
        ``LaplaceZero()`` (``method="vb"`` or ``"gibbs"``), ``SpikeSlab()`` (``"vb"`` or ``"gibbs"``) or
        ``Lasso()`` (``"vb"``, ``"em"`` or ``"gibbs"``) instead of ``penalty``; ``coef_`` are then model averages and
        ``result_.inclusion`` holds the inclusion probabilities.
    kernel : None, "rbf", "matern52", "linear" or a :mod:`bayesvm.kernels` kernel
        ``None``: the linear SVM.  Otherwise the nonlinear Bayesian SVM of Wenzel et al. (2017) with that
        kernel (hyperparameters learned by the lower bound; ``"rbf"`` is ``RBF()``); ``method`` is then
        ``"vb"``, ``"svi"``, ``"gibbs"`` or ``"em"`` (the last two at the hyperparameters VB learns) and, as
        for scikit-learn's kernel SVC, there is no ``coef_``.
    inducing : None, int or "all"
        Kernel fits: inducing points (default ``min(n, 100)``; ``"all"``: batch VB with the full kernel).
    missing : {"error", "drop", "impute"}
        ``"drop"`` fits on the rows without missing values; ``"impute"`` imputes them inside the model
        (joint normal model of the columns, missing completely at random) and also accepts NaN at
        ``predict`` time, integrating the missing entries out.
    max_iter, tol : int or None, float or None
        Passed to :func:`bayesvm.bsvm` (None: the engine's default).
    standardize : bool
        Scale the columns internally (results on the original scale).
    random_state : int or None
        Seed of the Gibbs chains.
    calibration_folds : int
        Folds of the cross-fitting that learns the probability map the first time ``predict_proba`` or
        ``decision_function`` is called (``fit.calibrate(folds=...)``; costs that many refits per binary
        fit, as ``CalibratedClassifierCV(cv=...)`` does).  ``predict`` needs no map.
    class_weight : None, "balanced" or dict
        As ``SVC(class_weight=...)``: each row's hinge loss counted its class's weight
        (``sklearn.utils.class_weight.compute_class_weight``; ``"balanced"`` is ``n / (n_classes n_k)``).  Two
        classes: one fit with both weights; one-vs-rest: class ``k``'s fit weighs ``k`` by its weight and the rest by
        1, as liblinear's one-vs-rest does.  Without a kernel or a selection prior (:func:`bayesvm.bsvm`).

    Attributes
    ----------
    classes_ : ndarray
        Class labels, sorted.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Posterior mean (VB, Gibbs) or mode (EM) of the slopes, original scale.
    intercept_ : ndarray of shape (1,) or (n_classes,)
    result_ : BSVMFit or list of BSVMFit
        The full fit (binary) or the one-vs-rest fits (multiclass, in ``classes_`` order).
    n_iter_ : ndarray
        Sweeps (VB), iterations (EM) or iterations per chain (Gibbs) of each binary fit.
    findings_ : DataFrame
        The warnings of the binary fits (``problem``, ``warning``, ``message``): a fit says them in one warning, so
        that a cross-validation prints one per fold.
    n_features_in_ : int
    feature_names_in_ : ndarray, only when fitted on a frame with string column names.
    """

    def __init__(
        self,
        method: str = "vb",
        penalty: float | str | None = "learn",
        prior: object = None,
        kernel: object = None,
        inducing: int | str | None = None,
        missing: str = "error",
        max_iter: int | None = None,
        tol: float | None = None,
        standardize: bool = True,
        random_state: int | None = None,
        calibration_folds: int = 5,
        class_weight: dict | str | None = None,
    ):
        self.method = method
        self.penalty = penalty
        self.prior = prior
        self.kernel = kernel
        self.inducing = inducing
        self.missing = missing
        self.max_iter = max_iter
        self.tol = tol
        self.standardize = standardize
        self.random_state = random_state
        self.calibration_folds = calibration_folds
        self.class_weight = class_weight

    def _frame(self, X: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])

    def _fit_binary(self, frame: pd.DataFrame, target: np.ndarray, class_weight: dict | None = None):
        data = frame.assign(y_=target.astype(int))
        formula = "y_ ~ " + " + ".join(frame.columns)
        kwargs = {
            "method": self.method,
            "penalty": self.penalty,
            "missing": self.missing,
            "tol": self.tol,
            "max_iter": self.max_iter,
            "standardize": self.standardize,
            "positive": 1,
            "prior": self.prior,
            "class_weight": class_weight,
        }
        if self.method == "gibbs":
            kwargs.update(seed=self.random_state, progress=False)
        kernel = self._kernel()
        if kernel is not None:
            del kwargs["penalty"], kwargs["prior"]
            kwargs.update(kernel=kernel, inducing=self.inducing, seed=self.random_state)
        return bsvm(formula, data, **kwargs)

    def _class_weights(self, y: np.ndarray) -> dict | None:
        """Each class's weight, as scikit-learn computes it for ``class_weight`` (None without weights; a
        :class:`PCVMClassifier` has none)."""
        if getattr(self, "class_weight", None) is None:
            return None
        from sklearn.utils.class_weight import compute_class_weight

        try:
            values = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        except ValueError as exc:  # (a key that is not a class, a misspelt mode)
            raise BayesvmError(f"class_weight: {exc}") from None
        return dict(zip(self.classes_.tolist(), values.tolist()))

    def _binary_weights(self, weights: dict | None, label: object) -> dict | None:
        """The binary fit's ``class_weight`` (target coded 1 for ``label``): both classes' weights with two classes,
        else ``label``'s weight against 1 for the rest."""
        if weights is None:
            return None
        key = label.item() if isinstance(label, np.generic) else label
        if self.classes_.size == 2:
            return {0: weights[self.classes_.tolist()[0]], 1: weights[key]}
        return {0: 1.0, 1: weights[key]}

    def _kernel(self):
        from .kernels import kernel_from

        return None if self.kernel is None else kernel_from(self.kernel)

    def fit(self, X, y) -> BayesianSVC:
        """Fit one binary Bayesian SVM (two classes) or one per class (one-vs-rest).  A fit that is refused (or
        fails) leaves the estimator as it was: a previous fit stays usable."""
        before = dict(vars(self))
        try:
            return self._fit(X, y)
        except BaseException:
            vars(self).clear()
            vars(self).update(before)
            raise

    def _fit(self, X, y) -> BayesianSVC:
        from .arguments import as_count

        self._kernel()  # validate before any work
        as_count(self.calibration_folds, "calibration_folds", low=2)
        allow_nan = "allow-nan" if self.missing in ("drop", "impute") else True
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_all_finite=allow_nan)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise BayesvmError(f"y has 1 class ({self.classes_.tolist()}); a classifier needs at least two")
        frame = self._frame(X)
        labels = [self.classes_[1]] if self.classes_.size == 2 else list(self.classes_)
        weights = self._class_weights(y)
        fits, findings, categories = [], [], []
        for label in labels:
            with warnings.catch_warnings(record=True) as caught:  # collected, then said once for this fit
                warnings.simplefilter("always")
                fits.append(self._fit_binary(frame, y == label, self._binary_weights(weights, label)))
            shown = label.item() if isinstance(label, np.generic) else label
            problem = f"class {shown!r}" + (" against the rest" if self.classes_.size > 2 else "")
            findings += [(problem, w.category.__name__, str(w.message)) for w in caught]
            categories += [w.category for w in caught]
        self.findings_ = pd.DataFrame(findings, columns=["problem", "warning", "message"])
        _warn_findings(self.findings_, categories[0] if categories else UserWarning)
        self.result_ = fits[0] if len(fits) == 1 else fits
        if self.kernel is None:
            coefs = np.array([fit.fixef.to_numpy() for fit in fits])
            self.intercept_ = coefs[:, 0]
            self.coef_ = coefs[:, 1:]
        self.n_iter_ = np.array([fit.n_iter for fit in fits])
        return self

    def _fits(self) -> list:
        return self.result_ if isinstance(self.result_, list) else [self.result_]

    def _positive_probabilities(self, frame: pd.DataFrame) -> np.ndarray:
        """``(n, fits)``: each binary fit's calibrated ``P(positive)``, its map learned on first use with
        ``calibration_folds`` folds."""
        columns = []
        for fit in self._fits():
            if fit.learned_calibration is None:
                fit.calibrate(folds=self.calibration_folds)
            columns.append(fit.predict(frame, kind="prob").to_numpy())
        return np.column_stack(columns)

    def _check(self, X) -> pd.DataFrame:
        check_is_fitted(self)
        allow_nan = "allow-nan" if self.missing == "impute" else True
        X = validate_data(self, X, dtype=np.float64, reset=False, ensure_all_finite=allow_nan)
        return self._frame(X)

    def decision_function(self, X) -> np.ndarray:
        """Log-odds of the posterior predictive probability, ``log P(+1) - log P(-1)`` per binary problem:
        shape (n,) for two classes, (n, n_classes) otherwise (one-vs-rest).

        Consistent with ``predict`` and ``predict_proba`` by construction (positive exactly where
        ``P > 0.5``; the same ranking).  The posterior mean of the linear predictor ``f`` (the same sign,
        a different ranking when the posterior variance of ``f`` varies) is ``fit.predict(frame, kind="link")``.
        """
        positive = self._positive_probabilities(self._check(X))
        positive = np.clip(positive, 1e-300, 1.0 - 1e-16)
        scores = np.log(positive) - np.log1p(-positive)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X) -> np.ndarray:
        """Posterior predictive class probabilities, columns in ``classes_`` order."""
        positive = self._positive_probabilities(self._check(X))
        if positive.shape[1] == 1:
            return np.column_stack([1.0 - positive[:, 0], positive[:, 0]])
        return positive / positive.sum(axis=1, keepdims=True)

    def predict(self, X) -> np.ndarray:
        """The class with the largest ``predict_proba``.

        For two classes that is ``P(classes_[1]) > 0.5``, i.e. the sign of the posterior mean of ``f``
        (:mod:`bayesvm.results.calibration`), computed without the probabilities (no calibration needed).  With
        ``class_weight`` the weights act on the decisions and the probabilities stay the data's: two classes, the
        weighted fit's sign of ``f``; one-vs-rest, the class whose fit against the rest has the largest posterior mean
        of ``f`` (liblinear's one-vs-rest rule).
        """
        frame = self._check(X)
        fits = self._fits()
        if len(fits) == 1:
            return self.classes_[(fits[0].predict(frame, kind="link").to_numpy() > 0).astype(int)]
        if getattr(self, "class_weight", None) is not None:
            links = np.column_stack([fit.predict(frame, kind="link").to_numpy() for fit in fits])
            return self.classes_[np.argmax(links, axis=1)]
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class PCVMClassifier(BayesianSVC):
    """Probabilistic classification vector machine (Chen, Tino & Yao) as a scikit-learn classifier.

    The estimator form of :func:`bayesvm.pcvm`, so the kernel width can be chosen the way the paper does,
    by cross-validation: ``GridSearchCV(PCVMClassifier(), {"lengthscale": [0.25, 0.5, 1, 2]})``.

    Parameters
    ----------
    method : {"laplace", "ep", "em"}
        Laplace or EP with incremental selection, or the original top-down EM.
    kernel : "rbf", "matern52", "linear" or a :mod:`bayesvm.kernels` kernel
        Basis function; a name is built with ``lengthscale`` (where the kernel has one) and kept fixed.
    lengthscale : float or None
        Lengthscale on the standardised inputs for a named kernel (None: the median pairwise distance).
    max_iter : int or None
        Selection steps / EM iterations (None: :func:`bayesvm.pcvm`'s default).
    standardize : bool
        Scale the columns internally.
    calibration_folds : int
        As for :class:`BayesianSVC`.

    Attributes
    ----------
    classes_, result_, n_iter_, n_features_in_ : as for :class:`BayesianSVC` (``result_`` is a ``PCVMFit``).
    n_vectors_ : ndarray
        Relevance vectors of each binary fit.
    """

    missing = "error"

    def __init__(
        self,
        method: str = "laplace",
        kernel: object = "rbf",
        lengthscale: float | None = None,
        max_iter: int | None = None,
        standardize: bool = True,
        calibration_folds: int = 5,
    ):
        self.method = method
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.max_iter = max_iter
        self.standardize = standardize
        self.calibration_folds = calibration_folds

    def _kernel(self):
        from .kernels import kernel_from

        if isinstance(self.kernel, str) and self.kernel.strip().lower() == "linear":  # (no lengthscale)
            return kernel_from(self.kernel, learn=False)
        return kernel_from(self.kernel, lengthscale=self.lengthscale, learn=False)

    def _fit_binary(self, frame: pd.DataFrame, target: np.ndarray, class_weight: dict | None = None):
        from .pcvm_fit import pcvm

        data = frame.assign(y_=target.astype(int))
        formula = "y_ ~ " + " + ".join(frame.columns)
        return pcvm(formula, data, kernel=self._kernel(), method=self.method, positive=1,
                    max_iter=self.max_iter, standardize=self.standardize)  # fmt: skip

    def fit(self, X, y) -> PCVMClassifier:
        """Fit one PCVM (two classes) or one per class (one-vs-rest)."""
        super().fit(X, y)
        self.n_vectors_ = np.array([fit.result.active.size for fit in self._fits()])
        return self
