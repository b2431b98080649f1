"""The saved-fit file's schema (``bayesvm.results.schema``): stable type names, independent of the modules that
define the classes; files of the previous format still load."""

from __future__ import annotations

import ast
import collections
import json
import pathlib
import warnings
import zipfile

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.results.schema import TYPES, schema_type, type_name

from ..adversarial.archives import edit_graph, rewrite

PACKAGE = pathlib.Path(bayesvm.__file__).resolve().parent
DATA = pathlib.Path(__file__).resolve().parent / "data"


def _package_classes() -> dict[str, str]:
    """Every class defined at the top level of a module of the package, by a name no other class has."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        found += [(node.name, module) for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)]
    count = collections.Counter(name for name, _ in found)
    return {name: module for name, module in found if count[name] == 1}


def test_the_schema_lists_every_class_of_the_package_where_it_lives():
    assert TYPES == _package_classes()
    for name in TYPES:
        cls = schema_type(name)
        assert cls is not None and type_name(cls) == name


def _frame(n: int = 60, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x": rng.normal(size=n), "g": rng.choice(["a", "b", "c", "d"], n)})
    frame["y"] = np.where(frame.x + rng.logistic(size=n) > 0, "yes", "no")
    return frame


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x + (1 | g)", _frame(), vb="meanfield", seed=0)
    return fit, fit.save(tmp_path_factory.mktemp("schema") / "fit.bsvm")


def test_a_file_names_the_package_types_by_the_schema_not_by_module(saved):
    _, path = saved
    with zipfile.ZipFile(path) as zf:
        graph, manifest = zf.read("graph.json").decode(), json.loads(zf.read("manifest.json"))
    assert manifest["fit_class"] == "BSVMFit" and manifest["format_version"] == 3
    assert '"type":"VBResult"' in graph and '"type":"BSVMFit"' in graph
    assert '"cls":"bayesvm' not in graph  # (formulaic's records keep their own paths)


def test_a_file_of_the_previous_format_loads_with_the_same_numbers():
    """``format2_meanfield.bsvm`` was saved by the format that named classes by ``module:qualname``."""
    old = bayesvm.load(DATA / "format2_meanfield.bsvm")
    np.testing.assert_allclose(old.fixef.to_numpy(), [0.29733613008387055, 0.5669091253850421], rtol=1e-12)
    # (its variance components stored their priors' numbers; they load as the priors' records)
    priors = {c.name: c.prior for c in old.problem.components}
    assert priors == {"penalty": bayesvm.priors.InverseGamma(0.01, 0.01), "(1 | g)": bayesvm.priors.HalfT(3.0, 2.5)}
    assert "(1 | g): sigma ~ half-t(3, 2.5)" in str(old.summary())
    np.testing.assert_allclose(
        old.predict(_frame().head(3), kind="pseudo"), [0.6900055118773957, 0.9581064685150288, 0.4954828915605714]
    )


@pytest.mark.parametrize(
    "node,match",
    [
        ({"$": "obj", "type": "Popen", "state": {}}, "names the type 'Popen'"),
        ({"$": "obj", "type": "_Sweep", "state": {}}, "names the type '_Sweep'"),
        ({"$": "obj", "cls": "bayesvm.engines.linear.vb:VBResult", "state": {}}, "by its path"),
    ],
)
def test_a_type_outside_the_schema_is_refused(saved, tmp_path, node, match):
    def change(graph):
        graph["state"]["method"] = {**node, "id": 10**6}
        return graph

    with pytest.raises(ValueError, match=match):
        bayesvm.load(rewrite(saved[1], tmp_path / "evil.bsvm", edit_graph(change)))


@pytest.mark.parametrize(
    "numbers,match",
    [({"prior_nu": "three", "prior_t_scale": 2.5}, "bad fields for VarianceComponent"),
     ({"prior_nu": 3.0, "prior_t_scale": 2.5, "prior": None}, "bad fields.*both the prior's record and its numbers"),
     ({"prior_nu": -3.0, "prior_t_scale": 2.5}, "does not carry a prior of its kind"),
     ({"prior_df": 0.0}, "does not carry a prior of its kind"),
     ({"prior_a": 0.5, "prior_b": -1.0}, "bad fields for VarianceComponent.*InverseGamma needs")],
)  # fmt: skip
def test_a_variance_component_of_the_earlier_layout_with_bad_numbers_is_refused(saved, tmp_path, numbers, match):
    """A component stored with its prior's numbers (the earlier layout) is read through schema.UPGRADES; numbers that
    are not what that layout held are refused as a damaged file, never a raw exception."""

    def change(graph):
        for node in _nodes(graph):
            if node.get("type") == "VarianceComponent" and "prior" in node["state"]:
                del node["state"]["prior"]
                node["state"].update(numbers)
        return graph

    with pytest.raises(ValueError, match=match):
        bayesvm.load(rewrite(saved[1], tmp_path / "old.bsvm", edit_graph(change)))


def _nodes(value):
    """Every dict of a decoded file graph."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _nodes(item)
