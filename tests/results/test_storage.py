"""The safe file format: every fit type round-trips, and nothing in a file can run code or load damaged."""

from __future__ import annotations

import io
import json
import os
import pickle
import warnings
import zipfile

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm import kernels, priors
from bayesvm.results import storage

from ..adversarial.archives import rewrite


def _frame(n=90, seed=0, missing=False):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "x1": rng.normal(size=n),
            "x2": rng.normal(size=n),
            "f": rng.choice(list("abc"), n),
            "g": rng.integers(0, 8, n),
        }
    )
    frame["y"] = (frame.x1 - 0.5 * frame.x2 + rng.normal(size=n) > 0).astype(int)
    if missing:
        frame.loc[::6, "x2"] = np.nan
    return frame


GIBBS = {"method": "gibbs", "draws": 40, "tune": 20, "chains": 2, "progress": False, "seed": 1}
FITS = {
    "accurate-vb": ("y ~ x1 + x2 + C(f) + (1 | g)", {}, False),
    "meanfield-vb": ("y ~ x1 + np.log(x2 ** 2) + (1 | g)", {"vb": "meanfield"}, False),
    "gibbs": ("y ~ x1 + x2 + (1 | g)", GIBBS, False),
    "em": ("y ~ x1 + x2", {"method": "em", "penalty": 0.5}, False),
    "laplace-zero-vb": ("y ~ x1 + x2 + f", {"prior": priors.LaplaceZero()}, False),
    "spike-slab-gibbs": ("y ~ x1 + x2", {"prior": priors.SpikeSlab(), **GIBBS}, False),
    "lasso-em": ("y ~ x1 + x2", {"prior": priors.Lasso(), "method": "em"}, False),
    "spike-slab-vb": ("y ~ x1 + x2 + (1 | g)", {"prior": priors.SpikeSlab(0.3)}, False),
    "lasso-vb": ("y ~ x1 + x2", {"prior": priors.Lasso()}, False),
    "spike-slab-svi": (
        "y ~ x1 + x2 + (1 | g)",
        {"prior": priors.SpikeSlab(0.3), "method": "svi", "max_iter": 400},
        False,
    ),
    "impute-mi-vb": ("y ~ x1 + x2", {"missing": "impute", "imputations": 3}, True),
    "impute-joint-vb": ("y ~ x1 + x2", {"missing": "impute", "imputation": "joint"}, True),
    "impute-gibbs": ("y ~ x1 + x2", {"missing": "impute", **GIBBS}, True),
    "svi": ("y ~ x1 + x2", {"method": "svi"}, False),
    "kernel-vb": ("y ~ x1 + x2", {"kernel": kernels.RBF(), "inducing": 20, "seed": 0}, False),
    "kernel-svi": ("y ~ x1 + x2", {"kernel": kernels.RBF(), "method": "svi", "max_iter": 100, "seed": 0}, False),
    "kernel-gibbs": ("y ~ x1 + x2", {"kernel": kernels.RBF(), "inducing": 10, **GIBBS}, False),
}


def _make(name):
    formula, options, missing = FITS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bayesvm.bsvm(formula, _frame(missing=missing), **options), _frame(seed=1, missing=missing)


SPARSE_FITS = {
    "sparse-vb": {"vb": "meanfield"},
    "probes-vb": {"vb": "meanfield", "control": bayesvm.Control(probes=16)},
    "sparse-em": {"method": "em"},
}


@pytest.mark.parametrize("name", SPARSE_FITS)
def test_sparse_path_fits_round_trip_exactly(name, tmp_path, monkeypatch):
    """Two crossed factors on the sparse path (the Schur-eliminated ``q``, its probe estimate, the mode): saved and
    loaded, they predict and summarise exactly as before, training rows (variances from the precision's pattern or
    the probes) and new rows (solves) alike."""
    from bayesvm import model

    monkeypatch.setattr(model, "SPARSE_FROM_COLUMNS", 10)  # two factors of 30 levels take the sparse path
    monkeypatch.setattr(model, "MAX_DENSE_WORK", 0.0)
    rng = np.random.default_rng(5)
    a, b, x = rng.integers(0, 30, 400), rng.integers(0, 30, 400), rng.standard_normal(400)
    eta = 0.8 * x + rng.normal(0, 1, 30)[a] + rng.normal(0, 0.7, 30)[b]
    frame = pd.DataFrame({
        "y": (rng.random(400) < 1 / (1 + np.exp(-eta))).astype(int), "x": x,
        "a": "a" + pd.Series(a).astype(str), "b": "b" + pd.Series(b).astype(str),
    })  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = bayesvm.bsvm("y ~ x + (1 | a) + (1 | b)", frame, seed=1, **SPARSE_FITS[name])
    assert fit.problem.is_sparse
    new = frame.sample(60, random_state=2)
    fit.calibrate(newdata=new)
    loaded = bayesvm.load(fit.save(tmp_path / "fit.bsvm"))
    for rows in (None, new):
        for kind in ("class", "prob", "pseudo", "link"):
            np.testing.assert_array_equal(
                np.asarray(loaded.predict(rows, kind=kind)), np.asarray(fit.predict(rows, kind=kind))
            )
        np.testing.assert_array_equal(loaded.predict_interval(rows).to_numpy(), fit.predict_interval(rows).to_numpy())
    assert str(loaded.summary()) == str(fit.summary())


@pytest.fixture(scope="module")
def em_file(tmp_path_factory):
    fit, _ = _make("em")
    return fit, fit.save(tmp_path_factory.mktemp("fits") / "em.bsvm")


@pytest.mark.parametrize("name", [*FITS, "pcvm"])
def test_every_fit_type_round_trips_exactly(name, tmp_path):
    if name == "pcvm":
        fit, new = bayesvm.pcvm("y ~ x1 + x2", _frame()), _frame(seed=1)
    else:
        fit, new = _make(name)
    fit.calibrate(newdata=new)  # the probability map (learned cheaply on held-out rows) is saved with the fit
    loaded = bayesvm.load(fit.save(tmp_path / "fit.bsvm"))
    assert type(loaded) is type(fit)
    for kind in ("class", "prob", "pseudo", "link"):
        np.testing.assert_array_equal(
            np.asarray(loaded.predict(new, kind=kind)), np.asarray(fit.predict(new, kind=kind))
        )
    assert str(loaded.summary()) == str(fit.summary())
    if name in ("gibbs", "meanfield-vb", "accurate-vb"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a, b = fit.to_inference_data(draws=50), loaded.to_inference_data(draws=50)
        for group in ("posterior", "log_likelihood"):
            for var in a[group].data_vars:
                np.testing.assert_array_equal(a[group][var].values, b[group][var].values)


def test_file_is_a_zip_of_data_with_a_manifest(em_file):
    _, path = em_file
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        names = set(zf.namelist())
    assert manifest["format"] == "bayesvm-fit" and manifest["format_version"] == storage.FORMAT_VERSION
    assert manifest["bayesvm_version"] == bayesvm.__version__
    assert names == {"manifest.json", "graph.json", *(f"arrays/{i}.npy" for i in range(manifest["arrays"]))}
    assert b"pickle" not in path.read_bytes()


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.bsvm"
    path.write_bytes(pickle.dumps({"format": "bayesvm-fit", "format_version": 1, "fit": _Payload(str(marker))}))
    with pytest.raises(ValueError, match="not a saved bayesvm fit.*allow_pickle"):
        bayesvm.load(path)
    assert not marker.exists()


def test_old_pickles_load_only_when_allowed_with_a_warning(em_file, tmp_path):
    fit, _ = em_file
    path = tmp_path / "old.bsvm"
    path.write_bytes(
        pickle.dumps({"format": "bayesvm-fit", "format_version": 1, "bayesvm_version": "0.1.0", "fit": fit})
    )
    with pytest.warns(UserWarning, match="can run arbitrary code"):
        old = bayesvm.load(path, allow_pickle=True)
    np.testing.assert_array_equal(old.predict(_frame(seed=2)), fit.predict(_frame(seed=2)))


def _rewrite(path, out, edit):
    """Re-pack a saved fit after ``edit(entries)``, with every checksum recomputed (an attacker can)."""

    def raw_manifest(entries):
        entries["manifest.json"] = json.dumps(entries["manifest.json"]).encode()
        edit(entries)
        entries["manifest.json"] = json.loads(entries["manifest.json"])

    return rewrite(path, out, raw_manifest)


def _edit_graph(change):
    def edit(entries):
        entries["graph.json"] = json.dumps(change(json.loads(entries["graph.json"]))).encode()

    return edit


def test_an_untouched_rewrite_loads(em_file, tmp_path):
    fit, path = em_file
    same = bayesvm.load(_rewrite(path, tmp_path / "same.bsvm", lambda entries: None))
    np.testing.assert_array_equal(same.predict(_frame(seed=2)), fit.predict(_frame(seed=2)))


@pytest.mark.parametrize(
    "name",
    [
        "accurate-vb",
        "gibbs",
        "spike-slab-gibbs",
        "laplace-zero-vb",
        "impute-mi-vb",
        "impute-joint-vb",
        "kernel-vb",
        "pcvm",
    ],
)
def test_files_from_the_flat_engine_layout_load(name, tmp_path):
    """Fits saved before the engines were split by family name classes such as ``bayesvm.engines.vb:VBResult``
    (and PCVM fits before their fit and output moved out of ``bayesvm.pcvm_fit``); they load into today's classes,
    with the same predictions."""
    from bayesvm.results.codec import MOVED_CLASSES, MOVED_MODULES
    from bayesvm.results.schema import TYPES

    fit, new = (bayesvm.pcvm("y ~ x1 + x2", _frame()), _frame(seed=1)) if name == "pcvm" else _make(name)
    path = fit.save(tmp_path / "new.bsvm")
    new_to_old = {new: old for old, new in MOVED_MODULES.items()}
    new_to_old_classes = {new: old for old, new in MOVED_CLASSES.items()}
    renamed = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("$") in ("obj", "enum") and "type" in node:  # format 2 named every class by its path
                node["cls"] = f"{TYPES[node['type']]}:{node.pop('type')}"
            if node.get("$") == "obj":
                module, qualname = node["cls"].split(":")
                if node["cls"] in new_to_old_classes:
                    node["cls"] = new_to_old_classes[node["cls"]]
                    renamed.append(node["cls"])
                elif module in new_to_old:
                    node["cls"] = f"{new_to_old[module]}:{qualname}"
                    renamed.append(node["cls"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    def flatten(entries):
        graph = json.loads(entries["graph.json"])
        walk(graph)
        entries["graph.json"] = json.dumps(graph).encode()
        manifest = json.loads(entries["manifest.json"])
        path = f"{TYPES[manifest['fit_class']]}:{manifest['fit_class']}"
        manifest["fit_class"], manifest["format_version"] = new_to_old_classes.get(path, path), 2
        entries["manifest.json"] = json.dumps(manifest).encode()

    old = bayesvm.load(_rewrite(path, tmp_path / "old.bsvm", flatten))
    assert renamed and all(n.split(":")[0] in MOVED_MODULES or n in MOVED_CLASSES for n in renamed), renamed
    np.testing.assert_array_equal(old.predict(new, kind="pseudo"), fit.predict(new, kind="pseudo"))
    assert type(old.result) is type(fit.result) and type(old) is type(fit)


@pytest.mark.parametrize("cls", ["os:system", "builtins:eval", "subprocess:Popen", "bayesvm.results.fit:np"])
def test_classes_outside_bayesvm_and_formulaic_are_refused(em_file, tmp_path, cls):
    def change(graph):
        graph["state"]["method"] = {"$": "obj", "cls": cls, "id": 10**6, "state": {}}
        return graph

    with pytest.raises(ValueError, match="cannot be loaded"):
        bayesvm.load(_rewrite(em_file[1], tmp_path / "evil.bsvm", _edit_graph(change)))


def test_special_attribute_names_are_refused(em_file, tmp_path):
    def change(graph):
        graph["state"]["__class__"] = graph["state"]["method"]
        return graph

    with pytest.raises(ValueError, match="bad attribute name '__class__'"):
        bayesvm.load(_rewrite(em_file[1], tmp_path / "evil.bsvm", _edit_graph(change)))


def test_a_formula_term_smuggled_into_a_file_is_refused(em_file, tmp_path):
    marker = tmp_path / "written"

    def smuggle(entries):
        text = entries["graph.json"].decode()
        assert '"x1"' in text
        evil = f"__import__('os').system('touch {marker}')"
        entries["graph.json"] = (
            text.replace('"expr":"x1"', '"expr":' + json.dumps(evil)).replace('"LOOKUP"', '"PYTHON"').encode()
        )

    with pytest.raises(ValueError, match="does not evaluate"):
        bayesvm.load(_rewrite(em_file[1], tmp_path / "evil.bsvm", smuggle))
    assert not marker.exists()


def test_object_arrays_in_a_file_are_refused(em_file, tmp_path):
    def object_array(entries):
        buffer = io.BytesIO()
        np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        entries["arrays/0.npy"] = buffer.getvalue()

    with pytest.raises(ValueError, match="cannot be loaded"):
        bayesvm.load(_rewrite(em_file[1], tmp_path / "evil.bsvm", object_array))


def test_a_file_that_holds_no_fit_is_refused(em_file, tmp_path):
    def not_a_fit(graph):
        return {"$": "dict", "id": 0, "items": []}

    with pytest.raises(ValueError, match="not the fit the manifest names"):
        bayesvm.load(_rewrite(em_file[1], tmp_path / "other.bsvm", _edit_graph(not_a_fit)))


def test_300_random_bit_flips_are_all_refused(em_file, tmp_path):
    fit, path = em_file
    raw = bytearray(path.read_bytes())
    rng = np.random.default_rng(0)
    target = tmp_path / "flipped.bsvm"
    for position in rng.integers(0, len(raw) * 8, 300):
        flipped = bytearray(raw)
        flipped[position // 8] ^= 1 << (position % 8)
        target.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match="cannot be loaded|not a saved bayesvm fit"):
            bayesvm.load(target)


def test_appended_bytes_are_refused(em_file, tmp_path):
    target = tmp_path / "appended.bsvm"
    target.write_bytes(em_file[1].read_bytes() + pickle.dumps(print))
    with pytest.raises(ValueError, match="cannot be loaded"):
        bayesvm.load(target)


def test_an_interrupted_save_leaves_the_previous_file_intact(em_file, tmp_path, monkeypatch):
    fit, path = em_file
    target = tmp_path / "fit.bsvm"
    fit.save(target)
    before = target.read_bytes()

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        fit.save(target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["fit.bsvm"]  # no temporary file left behind


def test_saving_something_that_is_not_data_names_it(em_file, tmp_path):
    fit, _ = em_file
    fit.extra = lambda: None  # a user's attribute that cannot be stored as data
    try:
        with pytest.raises(ValueError, match=r"fit\.extra.*cannot be stored"):
            fit.save(tmp_path / "x.bsvm")
    finally:
        del fit.extra


def _posterior_states(graph):
    """Every stored Gaussian posterior's state (the JSON nodes, to edit in place)."""
    found, stack = [], [graph]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("$") == "obj" and node.get("type") == "GaussianPosterior":
                found.append(node["state"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


@pytest.mark.parametrize("part", ["gain", "cov_b", "cov_d"])
def test_a_posterior_whose_arrays_do_not_fit_is_refused(part, tmp_path):
    """The predictors' compiled loops read a posterior's arrays without bounds checks: a file whose posterior holds
    arrays of the wrong shapes (here one array in place of another) is refused on loading."""
    fit, _ = _make("accurate-vb")
    path = fit.save(tmp_path / "fit.bsvm")

    def change(graph):
        states = _posterior_states(graph)
        assert states
        states[0][part] = {"$": "ref", "id": states[0]["mean_d"]["id"]}  # the same array twice
        return graph

    with pytest.raises(ValueError, match=f"the posterior's {part}s? do(es)? not fit"):
        bayesvm.load(_rewrite(path, tmp_path / "evil.bsvm", _edit_graph(change)))


def test_a_grouping_factor_naming_levels_it_does_not_have_is_refused(tmp_path):
    """Rows' level codes index compiled loops (the accurate fit's evidence, the Gibbs row pass): a file whose factor
    names a level beyond its count is refused on loading."""
    fit, _ = _make("accurate-vb")
    path = fit.save(tmp_path / "fit.bsvm")
    with zipfile.ZipFile(path) as archive:
        graph = json.loads(archive.read("graph.json"))
    found, stack = [], [graph]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("$") == "obj" and node.get("type") == "BlockedFactor":
                found.append(node["state"]["n_levels"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    assert found

    def fewer_levels(entries):
        text = entries["graph.json"].decode()
        entries["graph.json"] = text.replace('"n_levels":' + json.dumps(found[0]), '"n_levels":2').encode()

    with pytest.raises(ValueError, match="codes name levels it does not have"):
        bayesvm.load(_rewrite(path, tmp_path / "evil.bsvm", fewer_levels))


def test_a_problem_whose_response_misses_rows_of_its_design_is_refused(tmp_path):
    fit, _ = _make("gibbs")
    path = fit.save(tmp_path / "fit.bsvm")

    def change(graph):
        found, stack = [], [graph]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if node.get("$") == "obj" and node.get("type") == "VBProblem":
                    found.append(node["state"])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        assert found
        few = found[0]["fixed_precision"]  # an array of a few entries, read again as the response
        found[0]["y"] = {"$": "ndarray", "index": few["index"], "id": 10**9}
        return graph

    with pytest.raises(ValueError, match="response does not hold every row"):
        bayesvm.load(_rewrite(path, tmp_path / "evil.bsvm", _edit_graph(change)))


FRESH_PROCESS = """
import sys, warnings
import pandas as pd
import bayesvm
warnings.simplefilter("ignore")
new = pd.read_csv(sys.argv[1])
for path in sys.argv[2:]:
    fit = bayesvm.load(path)
    kinds = ("class", "prob", "link") if isinstance(fit, bayesvm.MulticlassFit) else ("class", "prob", "pseudo", "link")
    for kind in kinds:
        values = fit.predict(new, kind=kind)
        assert len(values) == len(new), (path, kind)
    print(path, "ok")
"""


@pytest.mark.once
def test_a_loaded_fit_predicts_every_kind_in_a_fresh_process(tmp_path):
    """In a process that imported nothing but ``bayesvm`` and loaded the files: no fitting function was imported
    there, so the probability map's fold refits must find theirs (each fit is saved before any probability is
    asked for, so the map is learned in the new process); the command line's ``predict`` too."""
    import subprocess
    import sys

    paths = []
    for name in ("accurate-vb", "impute-mi-vb", "kernel-vb", "em", "laplace-zero-vb", "svi"):
        fit, new = _make(name)
        paths.append(str(fit.save(tmp_path / f"{name}.bsvm")))
    paths.append(str(bayesvm.pcvm("y ~ x1 + x2", _frame(), method="em").save(tmp_path / "pcvm.bsvm")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gibbs = bayesvm.bsvm("y ~ x1 + x2", _frame(), **GIBBS)
        several = bayesvm.bsvm("f ~ x1 + x2", _frame(), vb="meanfield")  # three classes: one-vs-rest
    paths.append(str(gibbs.save(tmp_path / "gibbs.bsvm")))
    paths.append(str(several.save(tmp_path / "multiclass.bsvm")))
    csv = tmp_path / "new.csv"
    _frame(seed=1).to_csv(csv, index=False)
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(csv), *paths], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(" ok") == len(paths)
    cli = subprocess.run(
        [sys.executable, "-m", "bayesvm", "predict", paths[0], str(csv), "--kind", "prob", "--output", "csv"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert len(cli.stdout.strip().splitlines()) == len(_frame(seed=1)) + 1
