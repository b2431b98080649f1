"""numba (a dependency of the package): whether compiled code may run, how it is compiled,
and the row layout its sparse variants visit.

Where numba cannot be imported, or with ``BAYESVM_NUMBA=0`` in the environment, every caller takes its numpy path.
"""

from __future__ import annotations

import os

import numpy as np

try:
    import numba
except ImportError:  # the numpy paths serve
    numba = None

#: Environment variable that turns the compiled paths off when set to ``0``.
ENVIRONMENT_SWITCH = "BAYESVM_NUMBA"

#: :func:`sparse_rows` lists the nonzero columns of a dense part of at least this many columns when at most
#: :data:`SPARSE_ROWS_DENSITY` of its entries are nonzero (below, BLAS over every column is as fast).
SPARSE_ROWS_FROM_COLUMNS = 32
SPARSE_ROWS_DENSITY = 0.25


def available() -> bool:
    """Whether compiled code can run (numba importable and not switched off)."""
    return numba is not None and os.environ.get(ENVIRONMENT_SWITCH, "1") != "0"


def on_disk(function) -> bool:
    """Whether numba's disk cache holds compiled code of ``function`` (a function of :func:`compile_nogil`) for some
    signature, so that a process loads it instead of compiling it.  True where that cannot be told (no cache, or a
    numba whose cache is laid out otherwise): the caller then does what it would do with the code at hand."""
    try:
        return os.path.exists(function._cache._cache_file._index_path)
    except AttributeError:
        return True


_said: set[str] = set()


def say_once(key: str, message: str) -> None:
    """Print ``message`` on standard error the first time ``key`` is said in this process (a one-time wait)."""
    if key in _said:
        return
    _said.add(key)
    import sys

    print(f"bayesvm: {message}", file=sys.stderr, flush=True)


#: The one floating-point licence given to compiled sums over rows (:func:`compile_nogil`'s ``reassociate``): the terms
#: may be added in another order, so the loop runs in SIMD lanes.  NaN and infinities keep their IEEE meaning.
REASSOCIATE = {"reassoc"}


def compile_nogil(func, inline: bool = False, reassociate: bool = False):
    """``numba.njit(nogil=True)`` with the compiled code cached on disk; where numba finds no writable cache
    location it refuses ``cache=True`` at decoration time, and the function is then compiled on first use in
    each process instead of breaking ``import bayesvm``.  ``inline``: compiled into each compiled caller (a small
    helper called per level or per row, whose call would cost more than its body).  ``reassociate``: a sum over
    rows that may be added in any order (:data:`REASSOCIATE`; not with ``inline``, whose body takes its caller's
    flags)."""
    options = {"nogil": True, "inline": "always"} if inline else {"nogil": True}
    if reassociate:
        options["fastmath"] = REASSOCIATE
    try:
        return numba.njit(cache=True, **options)(func)
    except RuntimeError:
        return numba.njit(**options)(func)


def _capsule_signature(capsule) -> str:
    """The C signature a Cython ``__pyx_capi__`` capsule is named by (``"double (double, int __pyx_skip_dispatch)"``)."""
    import ctypes

    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return name(capsule).decode()


def scipy_special(name: str, arguments: int = 1):
    """``scipy.special``'s real function ``name`` of ``arguments`` doubles, callable from compiled code as
    ``function(x, ..., 0)`` (the last argument is Cython's ``skip_dispatch``): the C function that
    ``scipy.special.cython_special`` exports (the fused variant of double arguments where it has several), linked
    by a symbol of its own, so that the callers stay cacheable on disk (a ctypes pointer would be compiled in as a
    constant, which numba refuses to cache).  The same code as the ufunc of that name, so a compiled caller computes
    what the numpy path computes.  None without numba."""
    if numba is None:
        return None
    import llvmlite.binding as llvm
    import scipy.special.cython_special as cython_special
    from numba import types

    wanted = "double (" + ", ".join(["double"] * arguments) + ", int __pyx_skip_dispatch)"
    capi = cython_special.__pyx_capi__
    found = [key for key in capi if (key == name or key.endswith("fuse_0" + name) or key.endswith("fuse_1" + name))]
    found = [key for key in found if _capsule_signature(capi[key]) == wanted]
    if not found:
        raise ImportError(f"scipy.special.cython_special has no {wanted} function {name!r}")
    symbol = f"bayesvm_scipy_special_{name}"
    llvm.add_symbol(symbol, numba.extending.get_cython_function_address("scipy.special.cython_special", found[0]))
    return types.ExternalFunction(symbol, types.float64(*([types.float64] * arguments), types.intc))


def sparse_rows(D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row_ptr, row_cols)``: each row's nonzero columns (CSR's ``indptr`` and ``indices``) where the dense part is
    wide and mostly zero (:data:`SPARSE_ROWS_FROM_COLUMNS`, :data:`SPARSE_ROWS_DENSITY`; a crossed or nested factor's
    indicators beside the fixed effects), else two empty arrays (every column is visited)."""
    n, q = D.shape
    empty = np.zeros(0, dtype=np.int64)
    if q < SPARSE_ROWS_FROM_COLUMNS or np.count_nonzero(D) > SPARSE_ROWS_DENSITY * n * q:
        return empty, empty
    import scipy.sparse as sp

    rows = sp.csr_matrix(D)
    return rows.indptr.astype(np.int64), rows.indices.astype(np.int64)
