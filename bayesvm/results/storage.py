"""Saving and loading fits.

A fit is stored whole (design, formulaic model specs, engine output) with Python's ``pickle``
in a small envelope that names the format and the bayesvm version, so that a loaded fit
predicts, summarises and converts to ArviZ exactly like the original.  As with any pickle,
load only files you trust.  For the draws alone, in a portable format, use
``fit.to_inference_data().to_netcdf(path)`` (ArviZ; netCDF through h5netcdf or netCDF4).
"""

from __future__ import annotations

import pickle
from pathlib import Path

from ..errors import BayesvmError

FORMAT = "bayesvm-fit"
FORMAT_VERSION = 1


def save_fit(fit, path: str | Path) -> Path:
    from .. import __version__

    path = Path(path)
    envelope = {"format": FORMAT, "format_version": FORMAT_VERSION, "bayesvm_version": __version__, "fit": fit}
    with path.open("wb") as handle:
        pickle.dump(envelope, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def load_fit(path: str | Path):
    """Load a fit written by ``fit.save(path)``.

    Raises
    ------
    BayesvmError
        If the file is not a bayesvm fit or was written by a newer storage format.
    """
    with Path(path).open("rb") as handle:
        try:
            envelope = pickle.load(handle)
        except (pickle.UnpicklingError, EOFError) as exc:
            raise BayesvmError(f"{path} is not a saved bayesvm fit: {exc}") from None
    if not isinstance(envelope, dict) or envelope.get("format") != FORMAT:
        raise BayesvmError(f"{path} is not a saved bayesvm fit")
    if envelope["format_version"] > FORMAT_VERSION:
        raise BayesvmError(
            f"{path} was saved by bayesvm {envelope['bayesvm_version']} in a newer format; upgrade bayesvm to load it"
        )
    return envelope["fit"]
