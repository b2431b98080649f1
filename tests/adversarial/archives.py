"""Re-packing a saved fit as an attacker would: any entry edited, every unkeyed checksum recomputed."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile


def rewrite(path, out, edit, compression=zipfile.ZIP_STORED):
    """Re-pack the fit at ``path`` into ``out`` after ``edit(entries)`` (a dict of entry name -> bytes; the manifest
    is a parsed dict under ``"manifest.json"``), with the manifest's digests and the archive's checksum recomputed."""
    with zipfile.ZipFile(path) as zf:
        entries = {name: zf.read(name) for name in zf.namelist()}
    entries["manifest.json"] = json.loads(entries["manifest.json"])
    edit(entries)
    manifest = entries.pop("manifest.json")
    if "sha256" in manifest and isinstance(manifest["sha256"], dict):
        manifest["sha256"] = {name: hashlib.sha256(data).hexdigest() for name, data in entries.items()}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for name, data in entries.items():
            zf.writestr(name, data)
        zf.comment = b"bayesvm-sha256:" + b"0" * 64
    body = buffer.getvalue()[:-64]
    out.write_bytes(body + hashlib.sha256(body[: -len(b"bayesvm-sha256:")]).hexdigest().encode())
    return out


def edit_graph(change):
    """An ``edit`` that applies ``change`` to the parsed object graph."""

    def edit(entries):
        entries["graph.json"] = json.dumps(change(json.loads(entries["graph.json"]))).encode()

    return edit


def objects(graph, cls_suffix):
    """Every stored object node whose class name ends with ``cls_suffix`` (``":Design"``): a formulaic class path, or
    a type of the file schema (named ``"Design"``)."""
    found, stack = [], [graph]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            name = str(node.get("cls", "")) if "cls" in node else f":{node.get('type', '')}"
            if node.get("$") == "obj" and name.endswith(cls_suffix):
                found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found
