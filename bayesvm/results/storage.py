"""Saving and loading fits as data: a zip archive that loading can never turn into code.

The file is a standard zip archive (``unzip -l fit.bsvm`` lists it) holding

- ``manifest.json``: the format name and version, the bayesvm version that wrote it, the fit's type,
  and the SHA-256 digest of every other entry;
- ``graph.json``: the fit's object graph (:mod:`bayesvm.results.codec`): records of the types of the file schema
  (:mod:`bayesvm.results.schema`, named there independently of the modules that define them) and of formulaic's
  classes, each with only the fields its class declares, pandas indexes and frames, scipy sparse matrices, plain
  values;
- ``arrays/<i>.npy``: the numeric arrays, read with ``allow_pickle=False``.

The archive's comment is ``bayesvm-sha256:`` and the SHA-256 digest of every byte before it, and, for a file
saved with ``key=``, `` hmac-sha256:`` and the HMAC-SHA256 of the same bytes under that key.

What protects what:

- **Code.**  Nothing in a file is code: loading restores only declared fields of allowed classes without running
  their methods, and every formula term a file holds is checked, and later evaluated, by the package's own
  interpreter (:mod:`bayesvm.formula.interpreter`), never by Python's ``eval``.  A file cannot run code, whoever
  wrote it.
- **Corruption.**  The digests are unkeyed: they detect a damaged file (a flipped bit, a truncated copy), not a
  deliberate change, since anyone can recompute them.
- **Tampering.**  A file saved with ``fit.save(path, key=...)`` carries an HMAC under a key only its owner holds;
  ``bayesvm.load(path, key=...)`` refuses a file whose HMAC does not match (changed, unsigned, or signed with another
  key).  Without ``key=`` a file is loaded whoever wrote it: its numbers are whatever the file says (as with
  joblib or skops files, load files you trust, or sign them).
- **Resources.**  Before anything is decompressed, the manifest's counts, each entry's declared size and the whole
  archive's declared size are checked against a budget (:data:`MAX_EXPANSION` times the file's size, at least
  :data:`MIN_BUDGET`, and never more than half the available memory), so a zip bomb or a header that claims a huge
  array is refused before it allocates.

:func:`save_fit` writes to a temporary file in the same directory and renames it over the target, so an interrupted
save leaves any previous file intact.  Pickle is not used by default.  ``load_fit(path, allow_pickle=True)`` reads
files written by bayesvm 0.1's pickle format, with a warning: loading a pickle can run arbitrary code.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np

from ..errors import BayesvmError
from ..memory import available_memory
from .codec import MOVED_CLASSES, Decoder, Encoder, StorageError, read_array
from .schema import type_name

FORMAT = "bayesvm-fit"
#: Format 3 names each stored type by the file schema (:mod:`bayesvm.results.schema`); format 2, still read, named
#: classes by their module paths.
FORMAT_VERSION = 3
_COMMENT_PREFIX = b"bayesvm-sha256:"
_HMAC_PREFIX = b" hmac-sha256:"
_COMMENT_LENGTH = len(_COMMENT_PREFIX) + 64
_SIGNED_LENGTH = _COMMENT_LENGTH + len(_HMAC_PREFIX) + 64
#: How many times its own size an archive's entries may declare in all (saved fits expand 1-10 times).
MAX_EXPANSION = 100
#: Bytes an archive may always declare, however small the file.
MIN_BUDGET = 256 * 2**20
#: Largest manifest, in bytes.
MAX_MANIFEST = 2**20
#: The fits a file may hold: by class path (format 2) and by the schema's names (format 3).
_FIT_CLASSES = (
    "bayesvm.results.fit:BSVMFit",
    "bayesvm.results.kernel_fit:KernelFit",
    "bayesvm.results.pcvm_fit:PCVMFit",
    "bayesvm.results.multiclass:MulticlassFit",
)
_FIT_TYPES = tuple(path.split(":")[1] for path in _FIT_CLASSES)


def save_fit(fit, path: str | os.PathLike, key: bytes | str | None = None) -> Path:
    """Write ``fit`` to ``path`` atomically (temporary file, then rename); returns the path.

    Parameters
    ----------
    fit
        The fit.
    path
        The file to write.
    key
        Sign the file with HMAC-SHA256 under this key (bytes, or text read as UTF-8), so that
        ``load_fit(path, key=key)`` can tell that nobody without the key changed it.

    Raises
    ------
    StorageError
        If the fit holds a value that cannot be stored as data (it names the attribute), ``path`` or ``key`` is not
        usable, or the target cannot be written (it names the target).
    """
    from ..version import __version__

    path = _as_path(path, "save")
    secret = _as_key(key)
    encoder = Encoder()
    graph = encoder.encode(fit)
    entries: dict[str, bytes] = {"graph.json": json.dumps(graph, allow_nan=False, separators=(",", ":")).encode()}
    for i, array in enumerate(encoder.arrays):
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        entries[f"arrays/{i}.npy"] = buffer.getvalue()
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "bayesvm_version": __version__,
        "fit_class": type_name(type(fit)),
        "arrays": len(encoder.arrays),
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in entries.items()},
    }
    length = _COMMENT_LENGTH if secret is None else _SIGNED_LENGTH
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in entries.items():
            zf.writestr(name, data)
        zf.comment = b"0" * length
    body = archive.getvalue()[:-length]
    comment = _COMMENT_PREFIX + hashlib.sha256(body).hexdigest().encode()
    if secret is not None:
        comment += _HMAC_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    _write_atomically(path, body + comment)
    return path


def _as_path(path, verb: str) -> Path:
    if not isinstance(path, str | os.PathLike) or isinstance(path, bytes) or str(path) == "":
        raise StorageError(f"path must be a file name (str or pathlib.Path) to {verb}, got {type(path).__name__}")
    return Path(path)


def _as_key(key) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes | bytearray) or not key:
        raise StorageError(f"key must be non-empty bytes or text, got {type(key).__name__}")
    return bytes(key)


def _write_atomically(path: Path, data: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise StorageError(f"cannot save to {path}: it is a directory")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise StorageError(f"cannot save to {path}: {exc.strerror or exc} (in {directory})") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise StorageError(f"cannot save to {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_fit(path: str | os.PathLike, *, key: bytes | str | None = None, allow_pickle: bool = False):
    """Load a fit written by ``fit.save(path)``; never runs code from the file.

    Parameters
    ----------
    path
        The file.
    key
        The key the file was signed with (``fit.save(path, key=...)``): the file is refused unless its HMAC matches.
    allow_pickle
        Also read the pickle files of bayesvm 0.1 (with a warning: only for files you trust).

    Raises
    ------
    BayesvmError
        If the file is not a bayesvm fit, is damaged (any changed byte), was written by a newer format, declares
        more than its budget, holds anything a saved fit never holds, or (with ``key``) is not signed with the key.
    """
    path = _as_path(path, "load")
    secret = _as_key(key)
    try:
        size = path.stat().st_size
        if size > available_memory() // 2:
            raise BayesvmError(f"{path} is {size / 2**30:.1f} GiB, more than half the available memory")
        raw = path.read_bytes()
    except OSError as exc:
        raise BayesvmError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not raw.startswith(b"PK"):
        if raw.startswith(b"\x80") and allow_pickle:
            if secret is not None:
                raise BayesvmError(f"{path} is a bayesvm 0.1 pickle, which carries no signature to check")
            return _load_pickle(path, raw)
        hint = " (a bayesvm 0.1 pickle: load it with allow_pickle=True if you trust it)" if raw[:1] == b"\x80" else ""
        raise BayesvmError(f"{path} is not a saved bayesvm fit{hint}")
    try:
        return _load_archive(raw, secret)
    except BayesvmError as exc:
        raise BayesvmError(f"{path} cannot be loaded: {exc}") from None
    except (zipfile.BadZipFile, json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise BayesvmError(f"{path} cannot be loaded: the file is damaged ({type(exc).__name__}: {exc})") from None
    except (RecursionError, OverflowError, MemoryError, AttributeError, EOFError, NotImplementedError) as exc:
        raise BayesvmError(f"{path} cannot be loaded: the stored structure is invalid ({type(exc).__name__})") from None


def _checked_body(raw: bytes, secret: bytes | None) -> None:
    """Verify the archive's digest (and, with a key, its HMAC) over every byte before its comment."""
    signed = raw[-_SIGNED_LENGTH:]
    if signed.startswith(_COMMENT_PREFIX) and signed[_COMMENT_LENGTH:].startswith(_HMAC_PREFIX):
        body, digest, mac = raw[:-_SIGNED_LENGTH], signed[len(_COMMENT_PREFIX) : _COMMENT_LENGTH], signed[-64:]
    elif raw[-_COMMENT_LENGTH:].startswith(_COMMENT_PREFIX):
        body, digest, mac = raw[:-_COMMENT_LENGTH], raw[-64:], None
    else:
        raise StorageError("no checksum: not written by bayesvm.save, or damaged")
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest().encode(), digest):
        raise StorageError("the checksum does not match: the file is damaged or was changed after it was saved")
    if secret is None:
        return
    if mac is None:
        raise StorageError("it is not signed, and a key was given: it was saved without key= or changed since")
    if not hmac.compare_digest(hmac.new(secret, body, hashlib.sha256).hexdigest().encode(), mac):
        raise StorageError("its signature does not match the key: it was changed, or signed with another key")


def _load_archive(raw: bytes, secret: bytes | None = None):
    _checked_body(raw, secret)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        infos = zf.infolist()
        budget = min(available_memory() // 2, max(MIN_BUDGET, MAX_EXPANSION * len(raw)))
        declared = sum(info.file_size for info in infos)
        if declared > budget:
            raise StorageError(
                f"its entries declare {declared / 2**20:,.0f} MiB in all, more than {budget / 2**20:,.0f} MiB for a "
                f"file of {len(raw) / 2**20:,.1f} MiB ({MAX_EXPANSION} times its size at most)"
            )
        manifest = json.loads(_read_entry(zf, "manifest.json", MAX_MANIFEST))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise StorageError("not a bayesvm fit")
        version = manifest.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 2:
            raise StorageError(f"unknown format version {version!r}")
        if version > FORMAT_VERSION:
            raise StorageError(
                f"saved by bayesvm {manifest.get('bayesvm_version')} in a newer format; upgrade bayesvm to load it"
            )
        fit_class = manifest.get("fit_class")
        if version >= 3:
            if fit_class not in _FIT_TYPES:
                raise StorageError(f"it holds {fit_class!r}, not a fit")
        else:  # format 2: a class path, perhaps of an earlier layout
            if not isinstance(fit_class, str) or MOVED_CLASSES.get(fit_class, fit_class) not in _FIT_CLASSES:
                raise StorageError(f"it holds {fit_class!r}, not a fit")
            fit_class = MOVED_CLASSES.get(fit_class, fit_class).split(":")[1]
        digests = manifest.get("sha256")
        count = manifest.get("arrays")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count < len(infos):
            raise StorageError(f"the manifest declares {count!r} arrays in an archive of {len(infos)} entries")
        expected = {"graph.json", *(f"arrays/{i}.npy" for i in range(count))}
        if not isinstance(digests, dict) or set(digests) != expected:
            raise StorageError("the manifest does not list the archive's entries")
        if set(zf.namelist()) != expected | {"manifest.json"} or len(infos) != len(expected) + 1:
            raise StorageError("the archive holds entries the manifest does not list")

        def entry(name: str) -> bytes:
            data = _read_entry(zf, name, budget)
            if not isinstance(digests[name], str) or hashlib.sha256(data).hexdigest() != digests[name]:
                raise StorageError(f"entry {name} does not match its checksum")
            return data

        graph = json.loads(entry("graph.json"))
        decoder = Decoder(
            lambda i: read_array(entry(f"arrays/{_array_number(i, count)}.npy"), budget), _validators(), version
        )
        fit = decoder.decode(graph)
    if type_name(type(fit)) != fit_class:
        raise StorageError("the stored object is not the fit the manifest names")
    return fit


def _array_number(index, count: int) -> int:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
        raise StorageError(f"the graph refers to array {index!r}, which the archive does not hold")
    return index


def _read_entry(zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    info = zf.getinfo(name)
    if info.file_size > limit:
        raise StorageError(f"entry {name} would need {info.file_size / 2**30:.1f} GiB")
    with zf.open(info) as handle:
        data = handle.read(limit + 1)
    if len(data) != info.file_size:
        raise StorageError(f"entry {name} is not the size the archive says")
    return data


def _validators() -> dict:
    """Checks on restored objects: every formula text (the formula, its fixed part, each bar and each formulaic
    factor) must pass the interpreter's grammar, and every design's, Gaussian posterior's, grouping factor's and
    problem's arrays must fit together (names, rows and columns; compiled loops read them without bounds checks), and
    each variance component carry a prior of its kind."""
    from formulaic.parser.types.factor import Factor

    from ..formula.bars import Bar, ParsedFormula, check_parsed_formula
    from ..formula.design import Design, ReTerm
    from ..formula.restricted import check_factor, check_formula_part
    from ..linalg.dense import BlockedFactor, GaussianPosterior
    from ..model.problems import VarianceComponent, VBProblem

    return {
        Factor: check_factor,
        ParsedFormula: check_parsed_formula,
        Bar: lambda bar: check_formula_part(bar.expr),
        Design: Design.check_shapes,
        ReTerm: ReTerm.check_shapes,
        GaussianPosterior: GaussianPosterior.check_shapes,
        BlockedFactor: BlockedFactor.check_shapes,
        VBProblem: VBProblem.check_shapes,
        VarianceComponent: VarianceComponent.check_prior,
    }


def _load_pickle(path: Path, raw: bytes):
    import pickle

    warnings.warn(
        f"loading {path} with pickle (allow_pickle=True): a pickle can run arbitrary code; "
        "re-save the fit with fit.save() to get the safe format",
        UserWarning,
        stacklevel=3,
    )
    try:
        envelope = pickle.loads(raw)
    except Exception as exc:  # a damaged pickle can fail in many ways; report them as one
        raise BayesvmError(f"{path} is not a saved bayesvm fit: {type(exc).__name__}: {exc}") from None
    if not isinstance(envelope, dict) or envelope.get("format") != FORMAT or "fit" not in envelope:
        raise BayesvmError(f"{path} is not a saved bayesvm fit")
    return envelope["fit"]
