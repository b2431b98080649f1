import subprocess
import sys

import numpy as np
import pandas as pd

from bayesvm.__main__ import main


def test_example_toenail_prints_the_accurate_fit():
    out = subprocess.run(
        [sys.executable, "-m", "bayesvm", "example", "toenail"], capture_output=True, text=True, check=True
    )
    assert "Random effects" in out.stdout and "patientID" in out.stdout
    assert "accurate VB" in out.stdout and "expectation propagation" in out.stdout


def test_fit_any_csv(tmp_path, capsys):
    path = tmp_path / "d.csv"
    pd.DataFrame({"y": [0, 1, 0, 1, 1, 0, 1, 0], "x": [1.0, 2, 0.5, 3, 2.5, 0.1, 1.9, 0.7]}).to_csv(path, index=False)
    assert main(["fit", "y ~ x", str(path), "--penalty", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "fixed alpha = 0.5" in out and "Fixed effects" in out


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
        == 0
    )
    assert "r_hat" in capsys.readouterr().out
    assert main(["fit", "y ~ x", str(path), "--vb", "accurate"]) == 0
    assert "expectation propagation" in capsys.readouterr().out


def test_fit_with_probes_explains_where_they_apply(tmp_path, capsys):
    """``--probes`` reaches ``bsvm``: on a model the exact path solves cheaply it is refused with the reason."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"y": rng.integers(0, 2, 60), "x": rng.standard_normal(60), "g": rng.integers(0, 5, 60)})
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    assert main(["fit", "y ~ x + (1 | g)", str(path), "--probes", "16"]) == 2
    assert "sparse path" in capsys.readouterr().err
