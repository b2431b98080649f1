import io
import json
import subprocess
import sys

import numpy as np
import pandas as pd

import bayesvm
from bayesvm.__main__ import EXIT_OK, main


def test_example_toenail_prints_the_accurate_fit():
    out = subprocess.run(
        [sys.executable, "-m", "bayesvm", "example", "toenail"], capture_output=True, text=True, check=True
    )
    assert "Random effects" in out.stdout and "patientID" in out.stdout
    assert "accurate VB" in out.stdout and "accurate VB (EP" in out.stdout
    # each part under its own heading; the mean-field fit's warning under the mean-field heading, not before it
    first, second = out.stdout.index("== 1. The default fit"), out.stdout.index("== 2. The paper's mean-field VB")
    assert first < second and "ApproximationWarning" not in out.stdout[:second] and not out.stderr
    assert "Fit criterion: log evidence" in out.stdout  # EP's approximate log evidence
    assert "mean-field VB (Algorithm 2)" in out.stdout and "never decreased; converged" in out.stdout


def test_fit_any_csv(tmp_path, capsys):
    path = tmp_path / "d.csv"
    pd.DataFrame({"y": [0, 1, 0, 1, 1, 0, 1, 0], "x": [1.0, 2, 0.5, 3, 2.5, 0.1, 1.9, 0.7]}).to_csv(path, index=False)
    assert main(["fit", "y ~ x", str(path), "--penalty", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "fixed alpha = 0.5" in out and "Fixed effects" in out


def test_kernel_fit_tables_its_hyperparameters(tmp_path, capsys):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"x1": rng.normal(size=80), "x2": rng.normal(size=80)})
    frame["y"] = (frame["x1"] + 0.5 * rng.normal(size=80) > 0).astype(int)
    path = tmp_path / "k.csv"
    frame.to_csv(path, index=False)
    assert main(["fit", "y ~ x1 + x2", str(path), "--kernel", "rbf", "--inducing", "10", "--output", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table["term"]) == ["lengthscale", "variance"] and (table["effect"] == "hyperparameter").all()
    assert (table["estimate"] > 0).all()


def test_fit_reports_errors_without_traceback(tmp_path, capsys):
    path = tmp_path / "d.csv"
    pd.DataFrame({"y": [0, 1], "x": [1.0, 2]}).to_csv(path, index=False)
    assert main(["fit", "y ~ z", str(path)]) == 2
    assert "column 'z'" in capsys.readouterr().err


def test_fit_with_gibbs_and_accurate_vb(tmp_path, capsys):
    path = tmp_path / "d.csv"
    pd.DataFrame({"y": [0, 1, 0, 1, 1, 0, 1, 0] * 3, "x": [1.0, 2, 0.5, 3, 2.5, 0.1, 1.9, 0.7] * 3}).to_csv(
        path, index=False
    )
    assert (
        main(
            [
                "fit",
                "y ~ x",
                str(path),
                "--method",
                "gibbs",
                "--draws",
                "50",
                "--tune",
                "20",
                "--chains",
                "2",
                "--seed",
                "1",
            ]
        )
        == 3  # separated data: the chains do not mix, and the exit code says so
    )
    assert "r_hat" in capsys.readouterr().out
    assert main(["fit", "y ~ x", str(path), "--vb", "accurate"]) == 0
    assert "accurate VB (EP" in capsys.readouterr().out


def test_fit_with_probes_explains_where_they_apply(tmp_path, capsys):
    """``--probes`` reaches ``bsvm``: on a model the exact path solves cheaply it is refused with the reason."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"y": rng.integers(0, 2, 60), "x": rng.standard_normal(60), "g": rng.integers(0, 5, 60)})
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    assert main(["fit", "y ~ x + (1 | g)", str(path), "--probes", "16"]) == 2
    assert "sparse path" in capsys.readouterr().err


def _csv(tmp_path, frame, name="d.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return str(path)


def _grouped(seed=0, n=120):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 20, n)
    x = rng.standard_normal(n)
    u = rng.normal(0, 1.5, 20)
    y = np.where(x + u[g] + rng.logistic(size=n) > 0, "yes", "no")
    return pd.DataFrame({"y": y, "x": x, "z": rng.standard_normal(n), "g": g})


def test_fit_save_predict_and_summary_round_trip(tmp_path, capsys):
    data = _csv(tmp_path, _grouped())
    saved = str(tmp_path / "fit.bsvm")
    # (mean-field VB: the five refits that learn the saved probability map take 20 s with the accurate fit, whose
    # save and load tests/results/test_storage.py covers; the default fit's command line, test_example_toenail_*)
    fit_args = ["fit", "y ~ x + (1 | g)", data, "--vb", "meanfield", "--save", saved, "--output", "csv", "--seed", "1"]
    assert main(fit_args) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table.columns[:7]) == ["effect", "group", "term", "estimate", "std_error", "conf_low", "conf_high"]
    assert set(table["term"]) == {"(Intercept)", "x", "sd__(Intercept)"}
    new = _grouped(seed=5, n=7)
    new.index = range(100, 107)
    new_path = _csv(tmp_path, new, "new.csv")
    assert main(["predict", saved, new_path, "--kind", "prob", "--interval", "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    column = "prob_y=yes"  # the column names the class whose probability it holds
    assert len(rows) == 7 and {"row", column, "mean", "sd", "lower", "upper"} <= set(rows[0])
    assert all(0 < r[column] < 1 for r in rows)
    fit = bayesvm.load(saved)
    expected = fit.predict(pd.read_csv(new_path), kind="prob").to_numpy()
    assert np.allclose([r[column] for r in rows], expected)
    assert main(["summary", saved, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["term"] == "(Intercept)"
    assert main(["summary", saved]) == 0
    assert "Checks:" in capsys.readouterr().out


def test_fit_options_reach_bsvm(tmp_path, capsys):
    frame = _grouped(n=80)
    frame.loc[[3, 9, 20], "z"] = np.nan
    data = _csv(tmp_path, frame)
    assert main(["fit", "y ~ x + z", data, "--missing", "impute", "--imputations", "3", "--seed", "0"]) == 0
    assert "Imputed: z 3 value(s)" in capsys.readouterr().out
    assert main(["fit", "y ~ x + z", data, "--missing", "drop", "--prior", "laplace-zero", "--rho", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "Laplace-zero, rho = 0.2" in out and "Dropped rows" in out
    code = main(["fit", "y ~ x + z", data, "--missing", "drop", "--kernel", "rbf", "--inducing", "20", "--seed", "0"])
    assert code == 0 and "RBF" in capsys.readouterr().out
    args = ["fit", "y ~ x", data, "--method", "em", "--penalty", "1", "--max-iter", "500", "--tol", "1e-6"]
    assert main(args) == 0 and "posterior mode" in capsys.readouterr().out
    assert main(["fit", "y ~ x", data, "--vb", "meanfield", "--no-standardize"]) == 0
    assert "lower bound" in capsys.readouterr().out
    gibbs = ["fit", "y ~ x", data, "--method", "gibbs", "--draws", "300", "--tune", "200", "--chains", "2"]
    assert main(gibbs + ["--thin", "2", "--cores", "1", "--seed", "3"]) in (0, 3)
    assert "2 chains x 300 draws (thin 2)" in capsys.readouterr().out


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    data = _csv(tmp_path, _grouped(n=40))
    assert main(["fit", "y ~ x", data, "--rho", "0.1"]) == 2
    assert "--prior" in capsys.readouterr().err
    assert main(["fit", "y ~ x", data, "--kernel", "linear", "--lengthscale", "2"]) == 2
    assert main(["predict", str(tmp_path / "nothing.bsvm"), data]) == 2
    assert main(["docs", "nonesuch"]) == 2
    assert "toenail" in capsys.readouterr().err


def test_hints_use_command_line_syntax_and_each_warning_prints_once(tmp_path, capsys):
    x = np.linspace(-1, 1, 30)
    separated = pd.DataFrame({"y": np.where(x > 0, 1, 0), "x": x})
    data = _csv(tmp_path, separated)
    # under complete separation the learned penalty's variance gets the half-t on its SD, whose tail the lattice ends
    assert main(["fit", "y ~ x", data]) == EXIT_OK
    err = capsys.readouterr().err
    warning_lines = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning_lines) == len(set(warning_lines)) >= 1
    assert "--method gibbs" in err and "method='gibbs'" not in err
    assert "--paper-penalty-prior keeps" in err and "PriorSet()" not in err
    # the flag keeps the paper's IG(0.01, 0.01) on the penalty's variance (its tail leaves convergence to rounding)
    main(["fit", "y ~ x", data, "--paper-penalty-prior", "--penalty", "learn"])
    out = capsys.readouterr().out
    assert "sigma_u^2 ~ IG(0.01, 0.01)" in out and "half-t" not in out.split("Identifiability")[0]
    assert main(["fit", "y ~ x + w", _csv(tmp_path, separated.assign(w=np.nan), "w.csv")]) == 2
    err = capsys.readouterr().err
    assert "--missing" in err and "missing=" not in err


def test_command_line_hints():
    from bayesvm.__main__ import command_line_hints

    assert command_line_hints("use missing='drop' or missing='impute'") == "use --missing drop or --missing impute"
    assert command_line_hints("fix the penalty (e.g. penalty=1)") == "fix the penalty (e.g. --penalty 1)"
    assert command_line_hints("prior=LaplaceZero(rho=0.1)") == "--prior laplace-zero"
    assert command_line_hints("fit.check_vb(draws=2000) and x='a'") == "fit.check_vb(draws=2000) and x='a'"
    assert command_line_hints("standardize=False") == "--no-standardize"


def test_docs_are_installed_with_the_package(capsys):
    from bayesvm import docs

    assert {"toenail", "spam", "cardiac", "kernel", "pcvm"} <= set(docs.topics())
    assert main(["docs"]) == 0 and "toenail" in capsys.readouterr().out
    assert main(["docs", "toenail"]) == 0 and "Toenail" in capsys.readouterr().out
    assert main(["docs", "spam", "--path"]) == 0
    assert capsys.readouterr().out.strip().endswith("spam.md")
