"""Saved fits crafted by an attacker who can recompute every unkeyed checksum: code hidden in formula text, fields the
format does not define, sizes that do not add up, counts and archives that would allocate without bound.  Each is
refused when it loads (never later, on predict), quickly, naming what is wrong; nothing runs; a signed file is
refused unless its key matches."""

from __future__ import annotations

import hashlib
import json
import time
import zipfile

import numpy as np
import pandas as pd
import pytest

import bayesvm
from bayesvm.errors import BayesvmError

from .archives import edit_graph, objects, rewrite

N = 60


def _frame(seed=0):
    rng = np.random.default_rng(seed)
    data = pd.DataFrame({"x1": rng.normal(size=N), "x2": rng.normal(size=N), "g": rng.choice(list("pqrs"), N)})
    data["y"] = (data.x1 + rng.normal(size=N) > 0).astype(int)
    return data


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    fit = bayesvm.bsvm("y ~ x1 + center(x2) + (1 + x1 | g)", _frame(), vb="meanfield")
    path = tmp_path_factory.mktemp("saved") / "fit.bsvm"
    fit.save(path)
    return fit, path


def _load_refused(path, *words, key=None):
    started = time.perf_counter()
    with pytest.raises(BayesvmError) as info:
        bayesvm.load(path, key=key)
    assert time.perf_counter() - started < 30
    for word in words:
        assert word in str(info.value), str(info.value)
    return info


def _set_everywhere(graph, cls_suffix, field, value):
    nodes = objects(graph, cls_suffix)
    assert nodes, cls_suffix
    for node in nodes:
        node["state"][field] = value
    return graph


def _payloads(marker):
    return {
        "backticks in strings": f'I("``x1`"[np.lib._npyio_impl.os.system("touch {marker}")] + "``x1`")',
        "transform argument": f"center(__import__('os').system('touch {marker}'), x1)",
        "callee of a call": f"(__import__('os').system('touch {marker}'))(x1)",
    }


@pytest.mark.parametrize("payload", list(_payloads("m")))
@pytest.mark.parametrize("where", ["factor", "fixed part", "bar", "formula"])
def test_code_in_a_files_formula_text_is_refused_on_load(saved, tmp_path, payload, where):
    marker = tmp_path / "ran"
    evil = _payloads(marker)[payload]

    def change(graph):
        if where == "factor":  # formulaic's own factor records, as predict() would hand them to the materializer
            for node in objects(graph, ":Factor"):
                if node["state"].get("expr") == "x1":
                    node["state"]["expr"] = evil
                    node["state"]["eval_method"] = {"$": "enum", "cls": "formulaic.parser.types.factor:Factor.EvalMethod",
                                                    "name": "PYTHON"}  # fmt: skip
            return graph
        if where == "fixed part":
            return _set_everywhere(graph, ":ParsedFormula", "fixed", f"x1 + {evil}")
        if where == "bar":
            return _set_everywhere(graph, ":Bar", "expr", f"1 + {evil}")
        return _set_everywhere(graph, ":ParsedFormula", "formula", f"y ~ x1 + {evil}")

    path = rewrite(saved[1], tmp_path / "evil.bsvm", edit_graph(change))
    _load_refused(path)
    assert not marker.exists()


def test_a_field_the_format_does_not_define_is_refused(saved, tmp_path):
    """An attribute named ``predict`` would shadow the method."""
    path = rewrite(
        saved[1], tmp_path / "extra.bsvm", edit_graph(lambda g: _set_everywhere(g, ":BSVMFit", "predict", 1))
    )
    _load_refused(path, "BSVMFit", "predict")


def test_a_missing_field_is_refused(saved, tmp_path):
    def drop(graph):
        for node in objects(graph, ":Design"):
            del node["state"]["x_names"]
        return graph

    _load_refused(rewrite(saved[1], tmp_path / "short.bsvm", edit_graph(drop)), "x_names")


def test_shortened_names_are_refused_on_load_not_on_predict(saved, tmp_path):
    def shorten(graph):
        for node in objects(graph, ":Design"):
            node["state"]["x_names"]["items"] = node["state"]["x_names"]["items"][:-1]
        return graph

    _load_refused(rewrite(saved[1], tmp_path / "short.bsvm", edit_graph(shorten)), "columns")


def test_a_manifest_claiming_a_billion_arrays_is_refused_at_once(saved, tmp_path):
    def claim(entries):
        entries["manifest.json"]["arrays"] = 10**9

    _load_refused(rewrite(saved[1], tmp_path / "count.bsvm", claim), "1000000000")


def test_an_array_header_claiming_more_than_its_bytes_is_refused(saved, tmp_path):
    def lie(entries):
        header = b"\x93NUMPY\x01\x00" + b"v\x00"
        text = "{'descr': '<f8', 'fortran_order': False, 'shape': (2147483648,), }"
        text += " " * (118 - len(text)) + "\n"
        entries["arrays/0.npy"] = header + text.encode() + b"\x00" * 64

    _load_refused(rewrite(saved[1], tmp_path / "header.bsvm", lie), "size")


def test_a_zip_bomb_is_refused_before_it_is_decompressed(saved, tmp_path):
    """An entry of 300 MiB of zeros deflates to about 300 KiB (ratio about 1,000)."""

    def bomb(entries):
        count = entries["manifest.json"]["arrays"]
        entries[f"arrays/{count}.npy"] = b"\x00" * (300 * 2**20)
        entries["manifest.json"]["arrays"] = count + 1

    path = rewrite(saved[1], tmp_path / "bomb.bsvm", bomb, compression=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 3 * 2**20
    _load_refused(path, "MiB")


def test_declared_sizes_are_checked_before_any_decompression(saved, tmp_path):
    """A central directory that claims 3 GiB for one entry of a small file, the checksum recomputed."""
    raw = bytearray(saved[1].read_bytes())
    header = raw.find(b"graph.json", raw.find(b"PK\x01\x02")) - 46  # a central header's fixed part precedes its name
    assert raw[header : header + 4] == b"PK\x01\x02"
    raw[header + 24 : header + 28] = (3 * 2**30).to_bytes(4, "little")  # its uncompressed size
    prefix = b"bayesvm-sha256:"
    body = bytes(raw[: -(len(prefix) + 64)])
    forged = tmp_path / "forged.bsvm"
    forged.write_bytes(body + prefix + hashlib.sha256(body).hexdigest().encode())
    _load_refused(forged, "declare", "MiB")


def test_signed_files_load_only_with_their_key(saved, tmp_path):
    fit, _ = saved
    path = tmp_path / "signed.bsvm"
    fit.save(path, key=b"secret")
    loaded = bayesvm.load(path, key=b"secret")
    np.testing.assert_array_equal(loaded.predict(_frame(1), kind="link"), fit.predict(_frame(1), kind="link"))
    assert bayesvm.load(path) is not None  # without a key: loaded, its checksum checked
    _load_refused(path, "signature", key=b"other")
    unsigned = tmp_path / "unsigned.bsvm"
    fit.save(unsigned)
    _load_refused(unsigned, "not signed", key=b"secret")
    # an attacker re-packs a signed file with the unkeyed checksums recomputed: the signature is gone
    tampered = rewrite(path, tmp_path / "tampered.bsvm", lambda entries: None)
    _load_refused(tampered, "not signed", key=b"secret")
    with pytest.raises(BayesvmError, match="key"):
        fit.save(tmp_path / "bad-key.bsvm", key=3)


@pytest.mark.parametrize("target", [3, None, b"fit.bsvm", ""])
def test_load_and_save_name_a_bad_path(saved, target):
    with pytest.raises(BayesvmError, match="path"):
        bayesvm.load(target)
    with pytest.raises(BayesvmError, match="path"):
        saved[0].save(target)


def test_saving_to_an_unwritable_place_names_the_target(saved, tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "fit.bsvm"
    with pytest.raises(BayesvmError, match=str(missing).replace("/", ".")):
        saved[0].save(missing)
    with pytest.raises(BayesvmError, match="directory"):
        saved[0].save(tmp_path)


def test_a_restored_fit_predicts_with_its_learned_state(saved, tmp_path):
    """The stateful transform's centre is learned on the training rows and reused on new rows."""
    fit, path = saved
    loaded = bayesvm.load(path)
    new = _frame(7).assign(x2=lambda d: d.x2 + 100.0)
    np.testing.assert_allclose(loaded.predict(new, kind="link"), fit.predict(new, kind="link"))
    json.dumps(loaded.summary().to_dict() if hasattr(loaded.summary(), "to_dict") else {})
