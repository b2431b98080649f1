import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
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
    plt.close("all")


def test_plot_errors_name_the_problem(fit, toenail):
    with pytest.raises(ValueError, match="'school'"):
        plots.plot_ranef(fit, "school")
    with pytest.raises(ValueError, match="no term 'age'"):
        plots.plot_ranef(fit, "patientID", "age")
    em = bayesvm.bsvm("outcome ~ visit", toenail, method="em", penalty=0.5)
    with pytest.raises(ValueError, match="lower bound"):
        plots.plot_lower_bound(em)
    assert plots.plot_coefficients(em).has_data()
    plt.close("all")
