import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import bayesvm  # noqa: E402
from bayesvm import plots  # noqa: E402


@pytest.fixture(scope="module")
def fit(toenail):
    return bayesvm.bsvm("outcome ~ visit * treatment + (1 + visit | patientID)", toenail, vb="meanfield")


@pytest.mark.parametrize(
    "name, call",
    [
        ("lower_bound", lambda f: plots.plot_lower_bound(f)),
        ("coefficients", lambda f: plots.plot_coefficients(f)),
        ("ranef", lambda f: plots.plot_ranef(f, "patientID", "visit")),
    ],
)
def test_plots_save_png(fit, tmp_path, name, call):
    ax = call(fit)
    assert ax.has_data()
    path = tmp_path / f"{name}.png"
    ax.figure.savefig(path)
    assert path.stat().st_size > 2000
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    plt.close("all")


def test_plot_errors_name_the_problem(fit, toenail):
    with pytest.raises(ValueError, match="'school'"):
        plots.plot_ranef(fit, "school")
    with pytest.raises(ValueError, match="no term 'age'"):
        plots.plot_ranef(fit, "patientID", "age")
    em = bayesvm.bsvm("outcome ~ visit", toenail, method="em", penalty=0.5)
    with pytest.raises(ValueError, match="EM fit climbs a log posterior.*vb='meanfield'"):
        plots.plot_lower_bound(em)
    accurate = bayesvm.bsvm("outcome ~ visit", toenail)
    with pytest.raises(ValueError, match="accurate fit .* has no lower bound to trace.*vb='meanfield'"):
        plots.plot_lower_bound(accurate)
    assert plots.plot_coefficients(em).has_data()
    plt.close("all")


def _wide(n_terms: int = 64, seed: int = 0):
    """``n_terms`` predictors on scales from 0.01 to 1000 (one predictor's scale would swamp the rest)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = 400
    scales = np.geomspace(0.01, 1000.0, n_terms)
    X = rng.standard_normal((n, n_terms)) * scales
    f = X[:, :4] @ (np.array([1.0, -1.0, 0.5, 2.0]) / scales[:4])
    frame = pd.DataFrame(X, columns=[f"predictor_{j:02d}" for j in range(n_terms)])
    frame["y"] = np.where(f + rng.logistic(size=n) > 0, "yes", "no")
    return frame


def _tick_labels_overlap(ax, axis: str) -> bool:
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    labels = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    boxes = [label.get_window_extent(renderer) for label in labels if label.get_text()]
    return any(a.overlaps(b) for a, b in zip(boxes, boxes[1:]))


def test_forest_plot_reads_at_64_terms(tmp_path):
    import numpy as np

    frame = _wide()
    fit = bayesvm.bsvm("y ~ .", frame, vb="meanfield")
    ax = plots.plot_coefficients(fit, sort=True, standardize=True)
    ax.figure.savefig(tmp_path / "forest.png")
    labels = [label.get_text() for label in ax.get_yticklabels()]
    assert len(labels) == 65 and "(Intercept)" in labels and not _tick_labels_overlap(ax, "y")  # shown by default
    assert "standardised" in ax.get_title() and "per SD" in ax.get_xlabel()
    assert ax.get_legend() is not None
    means = [line for line in ax.get_lines() if line.get_marker() == "o"][0].get_xdata()
    assert np.all(np.diff(means) >= 0)  # sorted
    # standardised: slope x SD of its column, so the tiny- and huge-scale predictors compare
    labels = [label.get_text() for label in ax.get_yticklabels()]
    for name in ("predictor_00", "predictor_03", "predictor_63"):
        sd = frame[name].std(ddof=0)
        assert np.isclose(means[labels.index(name)], fit.fixef[name] * sd, rtol=1e-9)
    plt.close("all")


def test_inclusion_plot_has_a_legend_and_readable_labels(tmp_path):
    frame = _wide(n_terms=60)
    fit = bayesvm.bsvm("y ~ .", frame, prior=bayesvm.priors.LaplaceZero(rho=0.1))
    ax = plots.plot_inclusion(fit)
    ax.figure.savefig(tmp_path / "inclusion.png")
    assert ax.get_title() and ax.get_legend() is not None
    assert any(other.get_ylabel() == "P(slope > 0 | included)" for other in ax.figure.axes)  # the colour bar
    assert not _tick_labels_overlap(ax, "x")
    # every bar stands out from the white background, whatever its sign
    faces = np.array([bar.get_facecolor()[:3] for bar in ax.patches])
    assert faces.sum(axis=1).max() < 2.7
    plt.close("all")


def test_calibration_plot_has_title_and_labels(fit, tmp_path, toenail):
    ax = plots.plot_calibration(fit, newdata=toenail)
    ax.figure.savefig(tmp_path / "calibration.png")
    assert ax.get_title().startswith("Calibration") and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None
    plt.close("all")
