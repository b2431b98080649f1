"""Model matrices built on several threads at once (dask builds partitions on threads): the warning filter that turns
formulaic's data warning into an error is set and restored one thread at a time, never left behind."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pandas as pd
import pytest

from bayesvm.errors import DesignError
from bayesvm.formula.materializer import materialize


def test_designs_built_on_many_threads_leave_the_warning_filters_as_they_were():
    frame = pd.DataFrame({"x": np.linspace(0, 1, 50), "f": list("abcde") * 10})
    before = list(warnings.filters)
    errors = []

    def build():
        try:
            for _ in range(40):
                materialize("x + C(f)", frame, "fixed-effect")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert warnings.filters == before
    with pytest.warns(UserWarning, match="still a warning"):
        warnings.warn("still a warning", UserWarning, stacklevel=1)


def test_levels_a_spec_never_saw_are_an_error_naming_the_design():
    frame = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "f": ["a", "b", "a", "b"]})
    spec = materialize("x + C(f)", frame, "fixed-effect").model_spec
    with pytest.raises(DesignError, match="cannot build the new rows' design: Data has categories outside"):
        materialize(spec, frame.assign(f=["a", "b", "c", "a"]), "new rows'")
