"""The linear family's routes (bayesvm.engines.linear.routes)."""

from __future__ import annotations

import pytest

from bayesvm.engines import hinge_sites
from bayesvm.engines.linear import compiled_rows, routes
from bayesvm.linalg import compiled


@pytest.mark.skipif(not compiled_rows.available(), reason="numba is not installed")
def test_a_fit_that_compiles_its_row_loops_says_so_once(monkeypatch, capsys):
    """The first fit after install compiles for seconds: it says so once per process on standard error, and says
    nothing where numba's disk cache holds the code."""
    monkeypatch.setattr(compiled, "_said", set())
    monkeypatch.setattr(compiled, "on_disk", lambda function: True)
    routes.say_if_compiling(accurate=True)
    assert capsys.readouterr().err == ""
    missing = {id(hinge_sites.tilted_rows)}
    monkeypatch.setattr(compiled, "on_disk", lambda function: id(function) not in missing)
    routes.say_if_compiling(accurate=False)  # (mean-field: EP's tilted moments are not compiled by this fit)
    assert capsys.readouterr().err == ""
    routes.say_if_compiling(accurate=True)
    routes.say_if_compiling(accurate=True)
    assert capsys.readouterr().err.count("compiling the fit's row loops for this machine; this happens once") == 1
