"""A data-only encoding of a fit's object graph: JSON for the structure, ``.npy`` for the arrays.

:func:`encode` turns a fit into a JSON-ready tree plus a list of numeric arrays; :func:`decode` turns
them back.  Nothing in a file can run code when it is decoded:

- arrays are read by :func:`numpy.load` with ``allow_pickle=False`` (numeric, boolean, string and
  datetime dtypes only), after their header has been checked against the stored size;
- every other value is a JSON node of a fixed set of kinds (list, tuple, dict, set, slice, float,
  pandas index / series / frame, scipy sparse matrix, enum member, object);
- an object or enum member must be of a type of the file schema (:data:`bayesvm.results.schema.TYPES`, named there
  by a stable name, not by its module) or a class of ``formulaic`` (by its ``module:qualname``).  It is created with
  ``__new__`` and its attributes are set one by one: no ``__init__``, ``__setstate__``, ``__reduce__`` or any other
  method of the class runs;
- every formulaic factor evaluated as Python is checked against the restricted formula grammar
  (:mod:`bayesvm.formula.restricted`) before it can reach formulaic, so a file cannot smuggle code into
  a later ``predict``.

Shared references (the same array or object reached twice) are stored once and restored as one
object, so a loaded fit has the same structure as the saved one.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..errors import BayesvmError
from .schema import UPGRADES, schema_type, type_name

#: Classes whose instances may be stored: those defined in these packages (and nowhere else).
ALLOWED_MODULES = ("bayesvm", "formulaic")
#: Where classes stored by earlier layouts live now (files written before the engines were split by family
#: and the linear algebra moved to :mod:`bayesvm.linalg`): old module -> new module.  Only the module part
#: of a class path is translated, and only to another module of this package.
MOVED_MODULES = {
    "bayesvm.engines.linalg": "bayesvm.linalg.dense",
    "bayesvm.engines.sparse": "bayesvm.linalg.sparse",
    "bayesvm.engines.sparse_schur": "bayesvm.linalg.schur",
    "bayesvm.engines.sparse_probes": "bayesvm.linalg.probes",
    "bayesvm.engines.vb": "bayesvm.engines.linear.vb",
    "bayesvm.engines.gibbs": "bayesvm.engines.linear.gibbs",
    "bayesvm.engines.compiled_rows": "bayesvm.engines.linear.compiled_rows",
    "bayesvm.engines.interweave": "bayesvm.engines.linear.interweave",
    "bayesvm.engines.em": "bayesvm.engines.linear.em",
    "bayesvm.engines.ep": "bayesvm.engines.linear.ep",
    "bayesvm.engines.svi": "bayesvm.engines.linear.svi",
    "bayesvm.engines.stream_vb": "bayesvm.engines.linear.stream_vb",
    "bayesvm.engines.selection": "bayesvm.engines.selection.vb",
    "bayesvm.engines.selection_gibbs": "bayesvm.engines.selection.gibbs",
    "bayesvm.engines.selection_moves": "bayesvm.engines.selection.moves",
    "bayesvm.engines.lasso_em": "bayesvm.engines.selection.lasso_em",
    "bayesvm.engines.impute": "bayesvm.engines.imputation.joint_model",
    "bayesvm.engines.impute_mi": "bayesvm.engines.imputation.multiple",
    "bayesvm.engines.kernel_vb": "bayesvm.engines.kernel.vb",
    "bayesvm.engines.kernel_svi": "bayesvm.engines.kernel.svi",
    "bayesvm.engines.pcvm": "bayesvm.engines.kernel.pcvm",
    "bayesvm.engines.pcvm_em": "bayesvm.engines.kernel.pcvm_em",
    # the accurate fit's search over the hyperparameters, shared by the linear and selection engines
    "bayesvm.engines.linear.hyper_grid": "bayesvm.engines.hyper_grid",
    "bayesvm.engines.linear.hyperparameters": "bayesvm.engines.hyperparameters",
}
#: Classes that moved to another module of a different name (engine inputs now in the model layer): old
#: ``module:qualname`` -> new ``module:qualname``
MOVED_CLASSES = {
    "bayesvm.engines.vb:VarianceComponent": "bayesvm.model.problems:VarianceComponent",
    "bayesvm.engines.vb:VBProblem": "bayesvm.model.problems:VBProblem",
    "bayesvm.engines.selection:SelectionProblem": "bayesvm.model.problems:SelectionProblem",
    "bayesvm.engines.impute:ImputationProblem": "bayesvm.model.problems:ImputationProblem",
    "bayesvm.engines.kernel_vb:KernelProblem": "bayesvm.model.problems:KernelProblem",
    "bayesvm.engines.impute_mi:ImputationState": "bayesvm.engines.imputation.normal_model:ImputationState",
    "bayesvm.engines.impute_mi:ImputationDraws": "bayesvm.engines.imputation.normal_model:ImputationDraws",
    # the PCVM's output and fit, once defined beside pcvm() in the face
    "bayesvm.pcvm_fit:PCVMResult": "bayesvm.engines.kernel.pcvm:PCVMResult",
    "bayesvm.pcvm_fit:PCVMFit": "bayesvm.results.pcvm_fit:PCVMFit",
    # the record of a fit's call, once in the face beside the fold refits
    "bayesvm.crossfit:FitCall": "bayesvm.results.crossfit:FitCall",
    # the imputed selection sampler's output, beside the imputation segments that make it
    "bayesvm.engines.selection.gibbs:ImputedSelectionGibbsResult": (
        "bayesvm.engines.imputation.segments:ImputedSelectionGibbsResult"
    ),
    # the accurate fit's hyperparameters, in a module of their own
    "bayesvm.engines.ep:Hyperparameters": "bayesvm.engines.hyperparameters:Hyperparameters",
    "bayesvm.engines.linear.ep:Hyperparameters": "bayesvm.engines.hyperparameters:Hyperparameters",
    # a variance component's q, beside the rest of the component's interface
    "bayesvm.engines.vb:ComponentPosterior": "bayesvm.engines.components:ComponentPosterior",
    "bayesvm.engines.linear.vb:ComponentPosterior": "bayesvm.engines.components:ComponentPosterior",
    # the draws of every Gibbs engine, beside the driver that assembles them
    "bayesvm.engines.gibbs:GibbsResult": "bayesvm.engines.gibbs_driver:GibbsResult",
    "bayesvm.engines.linear.gibbs:GibbsResult": "bayesvm.engines.gibbs_driver:GibbsResult",
    # each selection prior's Gibbs step, in a module of its own that the laws table imports
    "bayesvm.engines.selection.gibbs:LaplaceZeroStep": "bayesvm.engines.selection.gibbs_steps:LaplaceZeroStep",
    "bayesvm.engines.selection.gibbs:SpikeSlabStep": "bayesvm.engines.selection.gibbs_steps:SpikeSlabStep",
    "bayesvm.engines.selection.gibbs:LassoStep": "bayesvm.engines.selection.gibbs_steps:LassoStep",
}
MOVED_MODULES["bayesvm.kernel_model"] = "bayesvm.model.kernel"
#: Attributes of formulaic's records that are neither dataclass fields, slots nor annotations (their internals):
#: ``module:qualname`` -> names.
FOREIGN_ATTRIBUTES = {
    "formulaic.formula:SimpleFormula": frozenset({"_SimpleFormula__terms", "ordering", "_parser", "_nested_parser"}),
    "formulaic.parser.types.term:Term": frozenset({"factors", "origin", "_factor_key", "_hash"}),
    "formulaic.materializers.types.scoped_factor:ScopedFactor": frozenset({"factor", "reduced"}),
    "formulaic.materializers.base:EncodedTermStructure": frozenset({"term", "scoped_terms", "columns"}),
}
#: Builtin bases a stored object may subclass (its value is stored beside its attributes).
_BUILTIN_BASES = (str, int, float, tuple, frozenset)
_SPARSE_FORMATS = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix}
_SPARSE_ARRAYS = {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array}


class StorageError(BayesvmError):
    """A file is not a valid saved fit, or a fit holds something that cannot be saved as data."""


# ----- encoding ------------------------------------------------------------------------------------
class Encoder:
    """Encode one object graph; ``arrays`` collects the numeric arrays in order of first use."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self._memo: dict[int, int] = {}
        self._keep: list[object] = []  # keeps encoded objects alive so that their ids stay unique

    def encode(self, obj: Any, path: str = "fit") -> Any:
        if obj is None or isinstance(obj, bool) or type(obj) in (str, int):
            return obj
        if type(obj) is float:
            return obj if math.isfinite(obj) else {"$": "float", "v": repr(obj)}
        if type(obj) is list:
            return [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, np.generic):
            return {"$": "npscalar", "dtype": obj.dtype.str, "v": self.encode(obj.item(), path)}
        if isinstance(obj, np.dtype):
            return {"$": "dtype", "v": _dtype_name(obj, path)}
        key = id(obj)
        if key in self._memo:
            return {"$": "ref", "id": self._memo[key]}
        node_id = len(self._memo)
        self._memo[key] = node_id
        self._keep.append(obj)
        node = self._encode_new(obj, path)
        node["id"] = node_id
        return node

    def _encode_new(self, obj: Any, path: str) -> dict:
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                items = [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj.ravel(order="C").tolist())]
                return {"$": "objarray", "shape": list(obj.shape), "items": items}
            _dtype_name(obj.dtype, path)
            self.arrays.append(obj if obj.flags.f_contiguous or obj.flags.c_contiguous else np.ascontiguousarray(obj))
            return {"$": "ndarray", "index": len(self.arrays) - 1}
        if type(obj) is tuple:
            return {"$": "tuple", "items": [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        if type(obj) in (set, frozenset):
            items = sorted((self.encode(v, path) for v in obj), key=repr)
            return {"$": type(obj).__name__, "items": items}
        if type(obj) is dict:
            return {
                "$": "dict",
                "items": [[self.encode(k, f"{path}.key"), self.encode(v, f"{path}[{k!r}]")] for k, v in obj.items()],
            }
        if type(obj) is slice:
            return {"$": "slice", "v": [self.encode(obj.start), self.encode(obj.stop), self.encode(obj.step)]}
        if type(obj) is range:
            return {"$": "range", "v": [obj.start, obj.stop, obj.step]}
        if type(obj) is complex:
            return {"$": "complex", "v": [repr(obj.real), repr(obj.imag)]}
        if isinstance(obj, pd.RangeIndex):
            return {"$": "rangeindex", "v": [obj.start, obj.stop, obj.step], "name": self.encode(obj.name)}
        if isinstance(obj, pd.MultiIndex):
            return {
                "$": "multiindex",
                "levels": [self.encode(level, path) for level in obj.levels],
                "codes": [self.encode(np.asarray(c), path) for c in obj.codes],
                "names": [self.encode(n) for n in obj.names],
            }
        if isinstance(obj, pd.Index):
            return {"$": "index", "values": self._encode_values(obj, path), "name": self.encode(obj.name)}
        if isinstance(obj, pd.Series):
            return {
                "$": "series",
                "values": self._encode_values(obj, path),
                "index": self.encode(obj.index, path),
                "name": self.encode(obj.name),
            }
        if isinstance(obj, pd.DataFrame):
            if not obj.columns.is_unique:
                raise StorageError(f"{path}: a data frame with duplicated column names cannot be stored")
            return {
                "$": "frame",
                "columns": self.encode(obj.columns, path),
                "index": self.encode(obj.index, path),
                "data": [self._encode_values(obj.iloc[:, j], f"{path}[{j}]") for j in range(obj.shape[1])],
            }
        if isinstance(obj, pd.Categorical):
            return {"$": "categorical", "values": self._encode_values(pd.Series(obj), path)}
        if sp.issparse(obj):
            fmt = obj.format
            if fmt not in _SPARSE_FORMATS:
                obj = obj.tocsr()
                fmt = "csr"
            parts = (obj.data, obj.row, obj.col) if fmt == "coo" else (obj.data, obj.indices, obj.indptr)
            return {
                "$": "sparse",
                "format": fmt,
                "array": isinstance(obj, sp.sparray),
                "shape": list(obj.shape),
                "parts": [self.encode(np.asarray(p), path) for p in parts],
            }
        cls = type(obj)
        _check_class(cls, path)
        if isinstance(obj, enum.Enum):
            return {"$": "enum", **_type_entry(cls, path), "name": obj.name}
        node: dict[str, Any] = {"$": "obj", **_type_entry(cls, path)}
        base = next((b for b in _BUILTIN_BASES if isinstance(obj, b)), None)
        if base is not None:
            node["base"] = [base.__name__, self.encode(base(obj), path)]
        attributes = _attributes(obj)
        undeclared = sorted(set(attributes) - stored_attributes(cls))
        if undeclared:
            raise StorageError(
                f"{path}.{undeclared[0]}: {cls.__qualname__} does not declare this attribute, so it cannot be stored "
                "(a saved fit holds only the fields its classes declare)"
            )
        node["state"] = {name: self.encode(value, f"{path}.{name}") for name, value in attributes.items()}
        return node

    def _encode_values(self, values: pd.Index | pd.Series, path: str) -> dict:
        """An index's or series' values with their pandas dtype (categories and extension dtypes kept)."""
        dtype = values.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cat = pd.Categorical(values)
            return {
                "kind": "categorical",
                "codes": self.encode(np.asarray(cat.codes), path),
                "categories": self.encode(cat.categories, path),
                "ordered": bool(cat.ordered),
            }
        if isinstance(dtype, np.dtype) and not dtype.hasobject:
            return {"kind": "numpy", "values": self.encode(np.asarray(values), path)}
        # object, string and nullable extension dtypes: the values as objects, missing ones as None
        array = np.asarray(values.astype(object))
        missing = pd.isna(array)
        if missing.any():
            array = array.copy()
            array[missing] = None
        return {"kind": "object", "dtype": _dtype_name(dtype, path), "values": self.encode(array, path)}


def _dtype_name(dtype: np.dtype | Any, path: str) -> str:
    if isinstance(dtype, np.dtype):
        if dtype.hasobject or dtype.kind == "V":
            if dtype.hasobject:
                return "object"
            raise StorageError(f"{path}: arrays of dtype {dtype} cannot be stored")
        return dtype.str
    return str(dtype)


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _type_entry(cls: type, path: str) -> dict[str, str]:
    """How a node names its class: ``{"type": name}`` for a type of the schema, ``{"cls": "module:qualname"}`` for
    formulaic's records."""
    if cls.__module__.split(".")[0] == "bayesvm":
        name = type_name(cls)
        if name is None:
            raise StorageError(f"{path}: {cls.__module__}.{cls.__qualname__} is not a type of the saved-fit schema")
        return {"type": name}
    return {"cls": _class_name(cls)}


def _check_class(cls: type, path: str) -> None:
    if cls.__module__.split(".")[0] not in ALLOWED_MODULES or "<locals>" in cls.__qualname__:
        raise StorageError(
            f"{path}: objects of type {cls.__module__}.{cls.__qualname__} cannot be stored as data "
            "(only bayesvm and formulaic records, numpy, pandas and scipy.sparse values)"
        )


@functools.cache
def stored_attributes(cls: type) -> frozenset[str]:
    """The attributes a stored instance of ``cls`` may hold: its dataclass fields, slots, annotated attributes,
    cached properties and class-level defaults (lower-case, not methods or properties), and for formulaic's records
    the internals of :data:`FOREIGN_ATTRIBUTES`.  Anything else in a file (an attribute named ``predict`` that
    would shadow the method) is refused, and a fit holding anything else cannot be saved."""
    names: set[str] = set(FOREIGN_ATTRIBUTES.get(_class_name(cls), ()))
    if dataclasses.is_dataclass(cls):
        names.update(field.name for field in dataclasses.fields(cls))
    for klass in cls.__mro__:
        slots = getattr(klass, "__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
        names.update(vars(klass).get("__annotations__", {}))
        for name, value in vars(klass).items():
            if isinstance(value, functools.cached_property):
                names.add(name)
            elif not (
                name.startswith("__")
                or name.isupper()
                or callable(value)
                or isinstance(value, property | staticmethod | classmethod)
            ):
                names.add(name)
    methods = {name for klass in cls.__mro__ for name, value in vars(klass).items() if _is_method(value)}
    return frozenset(names - methods - {"__dict__", "__weakref__"})


def _is_method(value: object) -> bool:
    return isinstance(value, property | staticmethod | classmethod) or (
        callable(value) and not isinstance(value, type | functools.cached_property)
    )


def _required_fields(cls: type) -> frozenset[str]:
    """Dataclass fields without a default: a stored instance that lacks one is refused."""
    if not dataclasses.is_dataclass(cls):
        return frozenset()
    return frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.init
    )


def _attributes(obj: object) -> dict[str, Any]:
    """Instance attributes: ``__dict__`` and every ``__slots__`` entry that is set."""
    state = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if name in ("__dict__", "__weakref__") or name in state:
                continue
            if hasattr(obj, name):
                state[name] = getattr(obj, name)
    return state


# ----- decoding ------------------------------------------------------------------------------------
class Decoder:
    """Decode a tree written by :class:`Encoder`; ``arrays`` reads array ``i`` of the file.

    ``validators`` maps a class to a check run on each decoded instance (e.g. the restricted formula
    grammar on formulaic factors); a check raises to refuse the file.
    """

    def __init__(
        self,
        arrays: Callable[[int], np.ndarray],
        validators: dict[type, Callable[[object], None]] | None = None,
        version: int = 3,
    ):
        self._arrays = arrays
        self._version = version
        self._memo: dict[int, Any] = {}
        self._validators = validators or {}
        self._depth = 0

    def decode(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, float):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            raise StorageError(f"unexpected node of type {type(node).__name__}")
        kind = node.get("$")
        if kind == "ref":
            ref = node.get("id")
            if ref not in self._memo:
                raise StorageError(f"reference to an unknown object {ref!r}")
            return self._memo[ref]
        if kind == "float":
            if node["v"] not in ("nan", "inf", "-inf"):
                raise StorageError(f"bad float {node['v']!r}")
            return float(node["v"])
        if kind == "npscalar":
            dtype = _safe_dtype(node["dtype"])
            return np.array(self.decode(node["v"]), dtype=dtype)[()]
        if kind == "dtype":
            return _safe_dtype(node["v"])
        self._depth += 1
        if self._depth > 200:
            raise StorageError("the stored structure is nested too deeply")
        try:
            value = self._decode_new(kind, node)
        finally:
            self._depth -= 1
        return value

    def _remember(self, node: dict, value: Any) -> Any:
        node_id = node.get("id")
        if not isinstance(node_id, int) or node_id in self._memo:
            raise StorageError(f"bad or repeated object id {node_id!r}")
        self._memo[node_id] = value
        return value

    def _decode_new(self, kind: str, node: dict) -> Any:
        if kind == "ndarray":
            return self._remember(node, self._arrays(node["index"]))
        if kind == "objarray":
            shape = tuple(int(s) for s in node["shape"])
            items = [self.decode(v) for v in node["items"]]
            if math.prod(shape) != len(items):
                raise StorageError("an object array's items do not match its shape")
            array = np.empty(len(items), dtype=object)
            array[:] = items
            return self._remember(node, array.reshape(shape))
        if kind == "tuple":
            return self._remember(node, tuple(self.decode(v) for v in node["items"]))
        if kind in ("set", "frozenset"):
            items = [self.decode(v) for v in node["items"]]
            return self._remember(node, set(items) if kind == "set" else frozenset(items))
        if kind == "dict":
            out: dict = self._remember(node, {})
            for key, value in node["items"]:
                out[self.decode(key)] = self.decode(value)
            return out
        if kind == "slice":
            return self._remember(node, slice(*(self.decode(v) for v in node["v"])))
        if kind == "range":
            return self._remember(node, range(*(int(v) for v in node["v"])))
        if kind == "complex":
            return self._remember(node, complex(float(node["v"][0]), float(node["v"][1])))
        if kind == "rangeindex":
            start, stop, step = (int(v) for v in node["v"])
            return self._remember(node, pd.RangeIndex(start, stop, step, name=self.decode(node["name"])))
        if kind == "multiindex":
            levels = [self.decode(v) for v in node["levels"]]
            codes = [self.decode(v) for v in node["codes"]]
            names = [self.decode(v) for v in node["names"]]
            return self._remember(node, pd.MultiIndex(levels=levels, codes=codes, names=names))
        if kind == "index":
            values = self._decode_values(node["values"])
            return self._remember(node, pd.Index(values, name=self.decode(node["name"]), tupleize_cols=False))
        if kind == "series":
            values = self._decode_values(node["values"])
            index = self.decode(node["index"])
            return self._remember(node, pd.Series(values, index=index, name=self.decode(node["name"])))
        if kind == "frame":
            columns = self.decode(node["columns"])
            index = self.decode(node["index"])
            data = [self._decode_values(v) for v in node["data"]]
            if len(data) != len(columns):
                raise StorageError("a stored data frame's columns do not match its data")
            frame = pd.DataFrame({j: values for j, values in enumerate(data)}, index=index)
            frame.columns = columns
            return self._remember(node, frame)
        if kind == "categorical":
            return self._remember(node, pd.Categorical(self._decode_values(node["values"])))
        if kind == "sparse":
            return self._remember(node, self._decode_sparse(node))
        if kind == "enum":
            cls, label = self._node_class(node)
            if not issubclass(cls, enum.Enum):
                raise StorageError(f"{label} is not an enumeration")
            try:
                return self._remember(node, cls[node["name"]])
            except KeyError:
                raise StorageError(f"{label} has no member {node['name']!r}") from None
        if kind == "obj":
            return self._decode_object(node)
        raise StorageError(f"unknown node kind {kind!r}")

    def _decode_values(self, spec: dict) -> Any:
        kind = spec.get("kind")
        if kind == "numpy":
            return self.decode(spec["values"])
        if kind == "categorical":
            codes = self.decode(spec["codes"])
            categories = self.decode(spec["categories"])
            return pd.Categorical.from_codes(codes, categories=categories, ordered=bool(spec["ordered"]))
        if kind == "object":
            values = self.decode(spec["values"])
            dtype = spec["dtype"]
            if dtype == "object":
                return values
            return pd.array(values, dtype=_safe_pandas_dtype(dtype))
        raise StorageError(f"unknown value kind {kind!r}")

    def _decode_sparse(self, node: dict) -> Any:
        fmt = node["format"]
        if fmt not in _SPARSE_FORMATS:
            raise StorageError(f"unknown sparse format {fmt!r}")
        shape = tuple(int(s) for s in node["shape"])
        data, first, second = (self.decode(p) for p in node["parts"])
        make = (_SPARSE_ARRAYS if node.get("array") else _SPARSE_FORMATS)[fmt]
        if fmt == "coo":
            matrix = make((data, (first, second)), shape=shape)
        else:
            matrix = make((data, first, second), shape=shape)
            matrix.check_format(full_check=True)
        return matrix

    def _node_class(self, node: dict) -> tuple[type, str]:
        """A node's class and how the file names it: a type of the schema (``"type"``, format 3) or a class path
        (``"cls"``: formulaic's records; every class in format 2)."""
        if "type" in node and self._version >= 3:
            cls = schema_type(node["type"])
            if cls is None:
                raise StorageError(f"the file names the type {node['type']!r}, which a saved fit never holds")
            return cls, str(node["type"])
        name = node.get("cls")
        if self._version >= 3 and isinstance(name, str) and name.split(".")[0].split(":")[0] == "bayesvm":
            raise StorageError(f"the file names the class {name!r} by its path; this format names types")
        return _resolve_class(name), str(name)

    def _decode_object(self, node: dict) -> Any:
        cls, label = self._node_class(node)
        if issubclass(cls, enum.Enum):
            raise StorageError(f"{label} is an enumeration, stored as an object")
        if "base" in node:
            base_name, base_node = node["base"]
            base = {b.__name__: b for b in _BUILTIN_BASES}.get(base_name)
            if base is None or not issubclass(cls, base):
                raise StorageError(f"{label} does not derive from {base_name!r}")
            value = self.decode(base_node)
            obj = base.__new__(cls, value)
        else:
            obj = object.__new__(cls)
        self._remember(node, obj)
        state = node["state"]
        if not isinstance(state, dict):
            raise StorageError(f"bad state for {label}")
        allowed = stored_attributes(cls)
        values = {}
        for name, value in state.items():
            if not isinstance(name, str) or not name.isidentifier() or (name.startswith("__") and name.endswith("__")):
                raise StorageError(f"bad attribute name {name!r} for {label}")
            values[name] = self.decode(value)
        upgrade = UPGRADES.get(type_name(cls) or "")
        if upgrade is not None:  # (an earlier layout of the type's fields)
            try:
                values = upgrade(values)
            except (TypeError, ValueError) as exc:  # (fields that are not what the earlier layout stored)
                raise StorageError(f"bad fields for {label}: {exc}") from None
        for name, value in values.items():
            if name not in allowed:
                raise StorageError(
                    f"{cls.__qualname__} has no field {name!r} that a saved fit defines (a file changed after it was "
                    "saved, or saved by another version of bayesvm: refit the model with this version and save it again)"
                )
            object.__setattr__(obj, name, value)
        missing = sorted(_required_fields(cls) - set(values))
        if missing:
            raise StorageError(
                f"the stored {cls.__qualname__} lacks its field(s) {missing} (a file changed after it was saved, or "
                "saved by another version of bayesvm: refit the model with this version and save it again)"
            )
        for klass, check in self._validators.items():
            if isinstance(obj, klass):
                check(obj)
        return obj


def _resolve_class(name: object) -> type:
    """The class ``module:qualname``, only from :data:`ALLOWED_MODULES` and only by plain attribute names."""
    if not isinstance(name, str) or name.count(":") != 1:
        raise StorageError(f"bad class name {name!r}")
    module_name, qualname = name.split(":")
    parts = qualname.split(".")
    if module_name.split(".")[0] not in ALLOWED_MODULES or not all(
        p.isidentifier() and not p.startswith("__") for p in [*module_name.split("."), *parts]
    ):
        raise StorageError(f"the file names the class {name!r}, which a saved fit never holds")
    if name in MOVED_CLASSES:  # a file from an earlier layout
        module_name, qualname = MOVED_CLASSES[name].split(":")
        parts = qualname.split(".")
    module_name = MOVED_MODULES.get(module_name, module_name)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError:
        raise StorageError(f"the file names the module {module_name!r}, which is not installed") from None
    for part in parts:
        target = getattr(target, part, None)
    if not isinstance(target, type) or target.__module__ != module_name or target.__qualname__ != qualname:
        raise StorageError(f"the file names {name!r}, which is not a class of that module")
    return target


def _safe_dtype(name: object) -> np.dtype:
    if not isinstance(name, str):
        raise StorageError(f"bad dtype {name!r}")
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise StorageError(f"bad dtype {name!r}") from None
    if dtype.hasobject or dtype.kind == "V":
        raise StorageError(f"dtype {name!r} cannot be loaded")
    return dtype


def _safe_pandas_dtype(name: str) -> Any:
    try:
        return pd.api.types.pandas_dtype(name)
    except (TypeError, ValueError):
        raise StorageError(f"bad pandas dtype {name!r}") from None


def read_array(raw: bytes, limit: int) -> np.ndarray:
    """An ``.npy`` array from bytes, after checking that its header describes exactly those bytes."""
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise StorageError(f"unsupported .npy version {version}")
    except ValueError as exc:
        raise StorageError(f"bad array header: {exc}") from None
    if dtype.hasobject or dtype.kind == "V":
        raise StorageError(f"stored array has dtype {dtype}, which cannot be loaded")
    size = math.prod(shape) * dtype.itemsize
    if size > limit or size != len(raw) - stream.tell():
        raise StorageError("a stored array's header does not match its size")
    stream.seek(0)
    return np.load(stream, allow_pickle=False)
