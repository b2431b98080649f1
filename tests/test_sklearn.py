import warnings

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayesvm.errors import BayesvmError
from bayesvm.sklearn import BayesianSVC, PCVMClassifier


# The checks test the wrapper's API, which every engine shares.  Each predict_proba on a new fit cross-fits
# ``calibration_folds`` fold fits for the probability calibration, so the suite runs a fixed-penalty fit (no variance
# to integrate: one EP solve per fit) instead of the learned-penalty default, with 2 folds; the default and the EM
# engine get the targeted tests below (and tests/results/test_calibration.py the default 5 folds).
@parametrize_with_checks([BayesianSVC(penalty=1.0, calibration_folds=2), PCVMClassifier(calibration_folds=2)])
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


def _blobs(n=150, k=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, (k, 2))
    y = rng.integers(0, k, n)
    return centers[y] + rng.standard_normal((n, 2)), y


def test_multiclass_one_vs_rest_probabilities_agree_with_predict():
    X, y = _blobs()
    clf = BayesianSVC().fit(X, np.array(["a", "b", "c"])[y])
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(X))
    assert clf.score(X, np.array(["a", "b", "c"])[y]) > 0.8
    assert clf.coef_.shape == (3, 2) and len(clf.result_) == 3


def test_pipeline_grid_search_and_cross_validation():
    X, y = _blobs(k=2, seed=1)
    pipe = make_pipeline(StandardScaler(), BayesianSVC())
    assert cross_val_score(pipe, X, y, cv=3).mean() > 0.8
    grid = GridSearchCV(BayesianSVC(method="em"), {"penalty": [0.1, 1.0]}, cv=3).fit(X, y)
    assert grid.best_params_["penalty"] in (0.1, 1.0)


def test_kernel_classifier_learns_a_nonlinear_boundary():
    from sklearn.datasets import make_circles

    X, y = make_circles(300, noise=0.1, factor=0.5, random_state=0)
    linear = cross_val_score(BayesianSVC(), X, y, cv=3).mean()
    kernel = cross_val_score(BayesianSVC(kernel="rbf", random_state=0), X, y, cv=3).mean()
    assert linear < 0.7 and kernel > 0.9, (linear, kernel)
    clf = BayesianSVC(kernel="rbf", inducing=30, random_state=0).fit(X, y)
    assert not hasattr(clf, "coef_")
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[(proba[:, 1] > 0.5).astype(int)])


def test_reserved_arguments_are_clear_errors():
    X, y = _blobs(k=2)
    with pytest.raises(ValueError, match="kernel"):
        BayesianSVC(kernel="poly").fit(X, y)
    with pytest.raises(ValueError, match="prior"):
        BayesianSVC(prior="laplace").fit(X, y)
    with pytest.raises(ValueError, match="calibration_folds"):
        BayesianSVC(calibration_folds=1).fit(X, y)


def test_selection_prior_zeroes_irrelevant_columns():
    from bayesvm.priors import LaplaceZero

    X, y = _blobs(k=2, seed=0)  # (seed 3's blobs are separable by one column, which alone then suffices)
    noise = np.random.default_rng(0).standard_normal((X.shape[0], 6))
    model = BayesianSVC(prior=LaplaceZero(0.05)).fit(np.hstack([X, noise]), y)
    inclusion = model.result_.inclusion["p_include"].to_numpy()
    assert inclusion[: X.shape[1]].min() > 0.9 and inclusion[X.shape[1] :].max() < 0.5
    assert np.all(np.abs(model.coef_[0, X.shape[1] :]) < 0.05)


def test_missing_drop_fits_on_complete_rows_and_refuses_nan_at_predict():
    X, y = _blobs(k=2, seed=2)
    X = X.copy()
    X[[0, 5], 0] = np.nan
    with pytest.raises(ValueError):
        BayesianSVC().fit(X, y)
    clf = BayesianSVC(missing="drop").fit(X, y)
    assert clf.result_.model.design.n == len(y) - 2
    with pytest.raises(ValueError):
        clf.predict(X)
    assert clf.predict(X[1:5]).shape == (4,)


def test_missing_impute_fits_every_row_and_predicts_rows_with_nan():
    # overlapping classes from a logistic model (blobs that separate completely would leave the imputations' fits
    # to the separated classes' prior)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((150, 2))
    y = (X @ [3.0, -2.0] + rng.logistic(size=150) > 0).astype(int)
    X[[0, 5, 9], 0] = np.nan
    clf = BayesianSVC(missing="impute").fit(X, y)
    assert clf.result_.model.design.n == len(y)
    assert clf.result_.imputation_report().variables.loc["x0", "n_missing"] == 3
    proba = clf.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1.0)
    assert (clf.predict(X) == y).mean() > 0.8


def test_frames_keep_feature_names():
    import pandas as pd

    X, y = _blobs(k=2, seed=3)
    frame = pd.DataFrame(X, columns=["age", "dose"])
    clf = BayesianSVC().fit(frame, y)
    assert list(clf.feature_names_in_) == ["age", "dose"]
    np.testing.assert_array_equal(clf.predict(frame), clf.predict(X))


def test_pcvm_classifier_chooses_the_lengthscale_by_cross_validation():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(240, 2))
    y = np.where(np.sin(2.5 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=240) > 0, "up", "down")
    grid = GridSearchCV(PCVMClassifier(), {"lengthscale": [0.05, 0.4, 50.0]}, cv=3).fit(X[:160], y[:160])
    assert grid.best_params_["lengthscale"] == 0.4  # too narrow memorises, too wide is almost linear
    best = grid.best_estimator_
    assert best.score(X[160:], y[160:]) > 0.8 and best.n_vectors_[0] < 40
    proba = best.predict_proba(X[160:])
    np.testing.assert_array_equal(best.classes_[(proba[:, 1] > 0.5).astype(int)], best.predict(X[160:]))
    em = PCVMClassifier(method="em", lengthscale=0.4).fit(X[:160], y[:160])
    assert em.score(X[160:], y[160:]) > best.score(X[160:], y[160:]) - 0.1  # EM: a MAP, slightly worse


def test_a_fit_says_its_findings_once_and_keeps_them():
    """One warning per fit (a cross-validation prints one per fold), naming the binary problem; every finding is
    kept in ``findings_``."""
    import warnings

    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = BayesianSVC().fit(X, y)
    ours = [w for w in caught if "BayesianSVC" in str(w.message)]
    assert len(ours) == 1 and "class 0 against the rest" in str(ours[0].message)
    assert len(caught) == 1
    assert {"problem", "warning", "message"} <= set(model.findings_.columns) and len(model.findings_) >= 1


@pytest.mark.parametrize("class_weight", ["balanced", {"no": 0.5, "yes": 3.0}])
def test_class_weight_is_svcs(class_weight):
    """With a fixed penalty and EM, BayesianSVC(class_weight=...) solves SVC(class_weight=...)'s problem."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 2))
    y = np.where(X[:, 0] - 0.4 * X[:, 1] + rng.normal(size=200) > 1.0, "yes", "no")
    ours = BayesianSVC(method="em", penalty=0.5, standardize=False, class_weight=class_weight).fit(X, y)
    svc = SVC(kernel="linear", C=1.0, class_weight=class_weight, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(ours.coef_, svc.coef_, atol=2e-5)
    np.testing.assert_allclose(ours.intercept_, svc.intercept_, atol=2e-5)
    with pytest.raises(BayesvmError, match="class_weight"):
        BayesianSVC(class_weight={"maybe": 2.0}).fit(X, y)
