"""Saving and loading fits as data: a zip archive that loading can never turn into code.

The file is a standard zip archive (``unzip -l fit.bsvm`` lists it) holding

- ``manifest.json``: the format name and version, the bayesvm version that wrote it, the fit's class,
  and the SHA-256 digest of every other entry;
- ``graph.json``: the fit's object graph (:mod:`bayesvm.results.codec`): records of bayesvm and
  formulaic classes, pandas indexes and frames, scipy sparse matrices, plain values;
- ``arrays/<i>.npy``: the numeric arrays, read with ``allow_pickle=False``.

The archive's comment is ``bayesvm-sha256:`` and the SHA-256 digest of every byte before it, so a
single flipped bit anywhere in the file is detected and the file refused.  :func:`load_fit` checks
that digest, the manifest and each entry's digest, reads the arrays without pickle, rebuilds only
allowed classes without running their methods, checks every formula term it restores against the
restricted formula grammar, and checks that every Gaussian posterior's arrays fit together (the compiled
predictors read them without bounds checks).  :func:`save_fit` writes to a temporary file in the same directory and
renames it over the target, so an interrupted save leaves any previous file intact.

Pickle is not used by default.  ``load_fit(path, allow_pickle=True)`` reads files written by bayesvm
0.1's pickle format, with a warning: loading a pickle can run arbitrary code.
"""

from __future__ import annotations

import hashlib
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

FORMAT = "bayesvm-fit"
FORMAT_VERSION = 2
_COMMENT_PREFIX = b"bayesvm-sha256:"
_COMMENT_LENGTH = len(_COMMENT_PREFIX) + 64
_FIT_CLASSES = (
    "bayesvm.results.fit:BSVMFit",
    "bayesvm.results.kernel_fit:KernelFit",
    "bayesvm.results.pcvm_fit:PCVMFit",
)


def save_fit(fit, path: str | os.PathLike) -> Path:
    """Write ``fit`` to ``path`` atomically (temporary file, then rename); returns the path.

    Raises
    ------
    StorageError
        If the fit holds a value that cannot be stored as data (it names the attribute).
    """
    from ..version import __version__

    path = Path(path)
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
        "fit_class": f"{type(fit).__module__}:{type(fit).__qualname__}",
        "arrays": len(encoder.arrays),
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in entries.items()},
    }
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in entries.items():
            zf.writestr(name, data)
        zf.comment = _COMMENT_PREFIX + b"0" * 64
    body = archive.getvalue()[:-64]
    digest = hashlib.sha256(body[: -len(_COMMENT_PREFIX)]).hexdigest().encode()
    _write_atomically(path, body + digest)
    return path


def _write_atomically(path: Path, data: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_fit(path: str | os.PathLike, *, allow_pickle: bool = False):
    """Load a fit written by ``fit.save(path)``; never runs code from the file.

    Parameters
    ----------
    path
        The file.
    allow_pickle
        Also read the pickle files of bayesvm 0.1 (with a warning: only for files you trust).

    Raises
    ------
    BayesvmError
        If the file is not a bayesvm fit, is damaged (any changed byte), was written by a newer
        format, or holds anything a saved fit never holds.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BayesvmError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not raw.startswith(b"PK"):
        if raw.startswith(b"\x80") and allow_pickle:
            return _load_pickle(path, raw)
        hint = " (a bayesvm 0.1 pickle: load it with allow_pickle=True if you trust it)" if raw[:1] == b"\x80" else ""
        raise BayesvmError(f"{path} is not a saved bayesvm fit{hint}")
    try:
        return _load_archive(raw)
    except BayesvmError as exc:
        raise BayesvmError(f"{path} cannot be loaded: {exc}") from None
    except (zipfile.BadZipFile, json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise BayesvmError(f"{path} cannot be loaded: the file is damaged ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise BayesvmError(f"{path} cannot be loaded: the stored structure is nested too deeply") from None


def _load_archive(raw: bytes):
    comment = raw[-_COMMENT_LENGTH:]
    if not comment.startswith(_COMMENT_PREFIX):
        raise StorageError("no checksum: not written by bayesvm.save, or damaged")
    if hashlib.sha256(raw[:-_COMMENT_LENGTH]).hexdigest().encode() != comment[len(_COMMENT_PREFIX) :]:
        raise StorageError("the checksum does not match: the file is damaged or was changed after it was saved")
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        manifest = json.loads(_read_entry(zf, "manifest.json", len(raw)))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise StorageError("not a bayesvm fit")
        version = manifest.get("format_version")
        if not isinstance(version, int) or version < 2:
            raise StorageError(f"unknown format version {version!r}")
        if version > FORMAT_VERSION:
            raise StorageError(
                f"saved by bayesvm {manifest.get('bayesvm_version')} in a newer format; upgrade bayesvm to load it"
            )
        fit_class = manifest.get("fit_class")
        if not isinstance(fit_class, str) or MOVED_CLASSES.get(fit_class, fit_class) not in _FIT_CLASSES:
            raise StorageError(f"it holds {fit_class!r}, not a fit")
        fit_class = MOVED_CLASSES.get(fit_class, fit_class)  # a file from an earlier layout
        digests = manifest.get("sha256")
        count = manifest.get("arrays")
        expected = {"graph.json", *(f"arrays/{i}.npy" for i in range(count if isinstance(count, int) else -1))}
        if not isinstance(digests, dict) or set(digests) != expected:
            raise StorageError("the manifest does not list the archive's entries")
        if set(zf.namelist()) != expected | {"manifest.json"}:
            raise StorageError("the archive holds entries the manifest does not list")
        budget = available_memory()

        def entry(name: str) -> bytes:
            data = _read_entry(zf, name, budget)
            if hashlib.sha256(data).hexdigest() != digests[name]:
                raise StorageError(f"entry {name} does not match its checksum")
            return data

        graph = json.loads(entry("graph.json"))
        decoder = Decoder(lambda i: read_array(entry(f"arrays/{int(i)}.npy"), budget), validators=_validators())
        fit = decoder.decode(graph)
    if f"{type(fit).__module__}:{type(fit).__qualname__}" != fit_class:
        raise StorageError("the stored object is not the fit the manifest names")
    return fit


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
    """Checks on restored objects: every formula term must pass the restricted grammar, and every Gaussian posterior's,
    grouping factor's and problem's arrays must fit together (compiled loops read them without bounds checks)."""
    from formulaic.parser.types.factor import Factor

    from ..formula.bars import ParsedFormula, check_formula_text
    from ..formula.restricted import check_factor
    from ..linalg.dense import BlockedFactor, GaussianPosterior
    from ..model.problems import VBProblem

    return {
        Factor: check_factor,
        ParsedFormula: lambda parsed: check_formula_text(parsed.formula),
        GaussianPosterior: GaussianPosterior.check_shapes,
        BlockedFactor: BlockedFactor.check_shapes,
        VBProblem: VBProblem.check_shapes,
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
