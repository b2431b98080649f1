"""The package's structure, measured from its source: the data flow's layers and the engine families import only
downward, nothing imports another module's private names, and modules and functions stay small."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bayesvm"
#: The engine families each family may import (the rest of ``bayesvm.engines`` is shared by all): the kernel and
#: selection engines build on the linear ones, and imputation wraps the linear and selection engines.
FAMILY_IMPORTS = {
    "linear": set(),
    "kernel": {"linear"},
    "selection": {"linear"},
    "imputation": {"linear", "selection"},
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _imported_modules(path: pathlib.Path, tree: ast.Module):
    """``(module imported, names)`` of every ``from ... import`` in the file, as absolute ``bayesvm`` modules."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = package[:-1] if package[-1] != "__init__" else package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]


def test_nothing_imports_another_modules_private_names():
    offenders = [
        f"{path.relative_to(PACKAGE)}: {module}.{name}"
        for path, tree in _modules()
        for module, names in _imported_modules(path, tree)
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert offenders == []


@pytest.mark.parametrize("family", sorted(FAMILY_IMPORTS))
def test_an_engine_family_imports_only_the_families_it_builds_on(family):
    others = set(FAMILY_IMPORTS) - {family} - FAMILY_IMPORTS[family]
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path, tree in _modules()
        if path.parent.name == family and path.parent.parent.name == "engines"
        for module, _ in _imported_modules(path, tree)
        if module.startswith("bayesvm.engines.") and module.split(".")[2] in others
    ]
    assert offenders == []


def test_engines_and_the_model_never_import_the_results_or_the_face():
    lower = ("engines", "model", "linalg", "formula", "checks")
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path, tree in _modules()
        if path.relative_to(PACKAGE).parts[0] in lower
        for module, _ in _imported_modules(path, tree)
        if module.startswith("bayesvm.results") or module in ("bayesvm.fitting", "bayesvm.kernel_fitting")
    ]
    assert offenders == []


def test_modules_and_functions_stay_small():
    """No module above 800 lines; no function with more than 20 parameters or more than 120 lines (its docstring
    included)."""
    large = []
    for path, tree in _modules():
        lines = len(path.read_text().splitlines())
        if lines > 800:
            large.append(f"{path.relative_to(PACKAGE)}: {lines} lines")
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            arguments = node.args
            count = len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
            length = node.end_lineno - node.lineno + 1
            if count > 20 or length > 120:
                large.append(f"{path.relative_to(PACKAGE)}:{node.name}: {count} parameters, {length} lines")
    assert large == []


#: Private members read through a name other than ``self`` / ``cls`` that are allowed: ``os._exit`` (documented
#: public API: a forked worker leaves without running the parent's exit handlers) and numba's dispatcher cache, whose
#: index file tells whether compiled code is on disk (numba has no public call for it; guarded by AttributeError).
ALLOWED_PRIVATE_READS = {("os", "_exit"), ("function", "_cache")}


def test_nothing_reads_another_objects_private_members():
    """``x._name`` only on ``self`` / ``cls``: a module or result asks another through its public members."""
    offenders = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value.id}.{node.attr}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.attr.startswith("_") and not node.attr.startswith("__")
        and node.value.id not in ("self", "cls") and (node.value.id, node.attr) not in ALLOWED_PRIVATE_READS
    ]  # fmt: skip
    assert offenders == []


def test_nothing_compares_type_names():
    """Dispatch by type or by a declared capability, never by ``type(x).__name__`` compared with a string."""
    offenders = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(
            isinstance(side, ast.Attribute) and side.attr == "__name__" and isinstance(side.value, ast.Call)
            and isinstance(side.value.func, ast.Name) and side.value.func.id == "type"
            for side in (node.left, *node.comparators)
        )
    ]  # fmt: skip
    assert offenders == []


def test_fits_and_results_are_never_changed_after_they_are_built():
    """A fit (and an engine's result) is built once with everything it holds: nothing assigns to an attribute of a
    name ``fit``, ``*_fit``, ``result`` or ``*_result`` from outside (a post-fit step builds a new one with
    ``dataclasses.replace``), so what a user holds never changes under them."""
    offenders = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {target.value.id}.{target.attr}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
        and (target.value.id in ("fit", "result") or target.value.id.endswith(("_fit", "_result")))
    ]  # fmt: skip
    assert offenders == []
