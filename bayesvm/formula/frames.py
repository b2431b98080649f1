"""User data in, one plain pandas frame out: the only place that knows about dtypes.

- Any data frame is accepted: pandas, and polars, pyarrow or any other library's frame (through its
  ``to_pandas()`` or the dataframe interchange protocol).  Duplicated column names are refused by name.
- pandas' nullable and extension dtypes become their plain counterparts on a *copy* of the columns a
  formula uses: ``Int64`` / ``Float64`` (and pyarrow-backed numbers) -> ``float64`` with ``NaN`` for
  ``pd.NA``; a ``boolean`` predictor -> ``float64`` 0/1 (formulaic reads numpy booleans as 0/1 too),
  a ``boolean`` response -> ``bool`` (``object`` where missing); ``string`` -> ``object``;
  ``category`` stays categorical.  The user's frame is never modified.
- Text columns whose values are numbers (a CSV read with a stray value) are refused with the column,
  the values that are not numbers, and how to convert; a predictor that was numeric in training and
  arrives as text in new data is converted when every value is a number and refused otherwise.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..errors import DataError, DesignError, IdentifiabilityWarning
from ..memory import check_memory
from .bars import formula_name

#: A fixed-effect factor with more levels than this share of the rows (and at least 50 levels) is warned about.
MANY_LEVELS_SHARE = 0.2
#: Most fixed-effect columns a fit takes: every engine factorises their ``p x p`` precision each sweep (``p^3 / 3``
#: operations: seconds at 5,000, minutes at 10,000, where a many-level factor belongs in a random-effect term).
MAX_FIXED_COLUMNS = 5000


def as_frame(data: object, what: str) -> pd.DataFrame:
    """``data`` as a pandas frame with unique column names and at least one row (not copied)."""
    if isinstance(data, pd.DataFrame):
        frame = data
    elif isinstance(data, dict):
        try:
            frame = pd.DataFrame(data)
        except (ValueError, TypeError) as exc:
            raise DataError(f"{what} given as a dict cannot be made a data frame: {exc}") from None
    elif hasattr(data, "to_pandas") or hasattr(data, "__dataframe__"):
        frame = _foreign_frame(data, what)
    else:
        raise DataError(
            f"{what} must be a data frame (pandas, polars, pyarrow) or a dict of columns, got {type(data).__name__}"
        )
    if not all(isinstance(name, str) for name in frame.columns):  # 0, 1, ... as pandas names unnamed columns
        named = frame.columns.map(str)
        if named.duplicated().any():
            clash = named[named.duplicated()].unique().tolist()
            raise DataError(f"{what} has column names that are the same as text: {clash}; rename them")
        frame = frame.rename(columns=str)  # a new frame: the caller's keeps its names
    duplicated = frame.columns[frame.columns.duplicated()].unique().tolist()
    if duplicated:
        raise DataError(f"{what} has duplicated column names {duplicated}; rename them so that each column is unique")
    if len(frame) == 0:
        raise DataError(f"{what} has no rows")
    return frame


def _foreign_frame(data: object, what: str) -> pd.DataFrame:
    name = type(data).__module__.split(".")[0] + "." + type(data).__name__
    try:
        if hasattr(data, "to_pandas"):
            frame = data.to_pandas()
        else:
            frame = pd.api.interchange.from_dataframe(data)
    except Exception as exc:  # noqa: BLE001 - a foreign library's failure, reported with its name
        raise DataError(
            f"{what} ({name}) could not be converted to a pandas frame: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"{what} ({name}) did not convert to a pandas DataFrame")
    return frame


def plain_columns(frame: pd.DataFrame, columns: list[str], labels: tuple[str, ...] = ()) -> pd.DataFrame:
    """A copy of ``frame[columns]`` with every nullable / extension dtype made plain (module docstring).

    ``labels``: columns whose values are class labels (the response): booleans stay booleans there.
    """
    out = {}
    for name in columns:
        out[name] = _plain(frame[name], as_label=name in labels)
    return pd.DataFrame(out, index=frame.index)


def _plain(column: pd.Series, as_label: bool = False) -> pd.Series:
    dtype = column.dtype
    if isinstance(dtype, (np.dtype, pd.CategoricalDtype, pd.DatetimeTZDtype)):
        return column.copy()  # plain already (time zones are refused by check_column_kinds)
    kind = getattr(dtype, "kind", "O")
    missing = column.isna().to_numpy()
    if kind in "iuf":
        values = column.to_numpy(dtype=float, na_value=np.nan)
        if not missing.any() and kind in "iu":
            values = column.to_numpy(dtype=np.int64)
        return pd.Series(values, index=column.index, name=column.name)
    if kind == "b":
        if not as_label:  # a 0/1 predictor, as formulaic reads numpy booleans, whether or not values are missing
            return pd.Series(column.to_numpy(dtype=float, na_value=np.nan), index=column.index, name=column.name)
        if not missing.any():
            return pd.Series(column.to_numpy(dtype=bool), index=column.index, name=column.name)
    values = column.to_numpy(dtype=object, na_value=np.nan)
    return pd.Series(values, index=column.index, name=column.name, dtype=object)


def _is_text(column: pd.Series) -> bool:
    return column.dtype == object or pd.api.types.is_string_dtype(column.dtype)


def _number_share(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Distinct non-missing values of a text column, and which of them read as numbers."""
    values = pd.unique(column.dropna())
    parsed = pd.to_numeric(pd.Series(values, dtype=object).map(_as_text), errors="coerce")
    return values, parsed.notna().to_numpy()


def _as_text(value: object) -> object:
    if isinstance(value, (bool, np.bool_)):
        return np.nan  # True / False are categories, not numbers
    return value.strip() if isinstance(value, str) else value


def check_text_numbers(frame: pd.DataFrame, columns: list[str], as_factor: set[str]) -> None:
    """Refuse text columns that hold numbers (all, or all but a few stray values).

    ``as_factor``: columns the formula explicitly treats as categorical (inside ``C()``), exempt.

    Raises
    ------
    DesignError
        Naming the column, examples of its values, the values that are not numbers, and how to convert.
    """
    for name in columns:
        column = frame[name]
        if name in as_factor or not _is_text(column):
            continue
        values, numeric = _number_share(column)
        if len(values) < 3 or numeric.mean() < 0.9:
            continue
        others = [v for v, ok in zip(values, numeric) if not ok][:5]
        examples = [v for v, ok in zip(values, numeric) if ok][:3]
        if others:
            detail = (
                f"{int(numeric.sum())} of its {len(values)} distinct values are numbers (e.g. {examples}) but "
                f"{others} are not; fix those values, or convert with pd.to_numeric(data[{name!r}], errors='coerce') "
                "to make them missing"
            )
        else:
            detail = f"every value is a number (e.g. {examples}); convert it with pd.to_numeric(data[{name!r}])"
        stored = (
            "stored as text"
            if any(isinstance(v, str) for v in values)
            else f"in a column of dtype {column.dtype} (Python objects, read as categories)"
        )
        raise DesignError(
            f"column {name!r} holds numbers {stored}, which would make one dummy column per distinct value: "
            f"{detail}, or write C({formula_name(name)}) in the formula if it really is a factor"
        )


def coerce_like_training(frame: pd.DataFrame, numeric: frozenset[str], what: str) -> pd.DataFrame:
    """Convert text columns of ``frame`` that were numeric in training; refuse those that are not numbers."""
    for name in sorted(numeric & set(frame.columns)):
        column = frame[name]
        if not _is_text(column) and not pd.api.types.is_bool_dtype(column.dtype):
            continue
        parsed = pd.to_numeric(column.map(_as_text), errors="coerce")
        bad = parsed.isna() & column.notna()
        if bad.any():
            examples = pd.unique(column[bad])[:5].tolist()
            raise DesignError(
                f"column {name!r} was numeric in the training data but {what} has {int(bad.sum())} value(s) that are "
                f"not numbers, e.g. {examples}"
            )
        frame[name] = parsed.astype(float)
    return frame


#: Kinds of an object column's cells (:func:`pandas.api.types.infer_dtype`) that hold one number or label each.
PLAIN_CELLS = frozenset(
    {"string", "bytes", "boolean", "integer", "floating", "mixed-integer-float", "decimal", "empty"}
)


def check_column_kinds(frame: pd.DataFrame, columns: list[str]) -> None:
    """Refuse columns a model matrix cannot be built from: dates and times, complex numbers, cells holding lists."""
    for name in columns:
        column = frame[name]
        dtype = column.dtype
        if (
            pd.api.types.is_datetime64_any_dtype(dtype)
            or pd.api.types.is_timedelta64_dtype(dtype)
            or isinstance(dtype, (pd.PeriodDtype, pd.IntervalDtype))
        ):
            raise DesignError(
                f"column {name!r} holds dates, times or intervals ({dtype}); convert it to a number first, "
                f"e.g. days since the first date: (data[{name!r}] - data[{name!r}].min()).dt.days"
            )
        if pd.api.types.is_complex_dtype(dtype):
            raise DesignError(f"column {name!r} holds complex numbers; a model matrix needs real numbers")
        # (pandas' C pass names the cells' kind; only a mixed column is looked at cell by cell)
        if pd.api.types.is_object_dtype(dtype) and pd.api.types.infer_dtype(column, skipna=True) not in PLAIN_CELLS:
            cells = column.dropna()
            bad = cells.map(lambda v: isinstance(v, (list, tuple, dict, set, np.ndarray, pd.Timestamp, complex)))
            if bad.any():
                example = cells[bad].iloc[0]
                raise DesignError(
                    f"column {name!r} holds {type(example).__name__} values in its cells (e.g. row "
                    f"{cells.index[bad.to_numpy()][0]!r}: {example!r}); each cell must be one number or one label"
                )


def check_factor_sizes(frame: pd.DataFrame, columns: list[str], n: int, max_columns: int | None = None) -> None:
    """Before the fixed-effect design is built: warn about factors with very many levels, refuse a design
    that would not fit in memory (one dummy column per level), or with more than ``max_columns`` columns."""
    width = 1
    widths = {}
    for name in columns:
        column = frame[name]
        if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
            width += 1
            continue
        levels = int(column.nunique(dropna=True))
        width += max(levels - 1, 1)
        widths[name] = levels
        if levels >= 50 and levels > MANY_LEVELS_SHARE * n:
            warnings.warn(
                f"column {name!r} is a factor with {levels:,} levels on {n:,} rows: the fixed part gets one "
                f"coefficient per level, each estimated from about {n / levels:.1f} rows (slow and weakly "
                f"identified); for a grouping variable write (1 | {name}) instead",
                IdentifiabilityWarning,
                stacklevel=4,
            )
    if max_columns is not None and width > max_columns:
        widest = sorted(widths, key=widths.get, reverse=True)[:3]
        raise DesignError(
            f"the fixed part would have about {width:,} columns, more than {max_columns:,}: every engine "
            f"factorises their precision each sweep; the factor(s) {widest} have "
            f"{', '.join(f'{widths[w]:,}' for w in widest)} levels.  A factor with many levels belongs in a "
            f"random-effect term, e.g. (1 | {widest[0]}), fitted on its sparse structure"
        )
    check_memory(
        3 * 8.0 * n * width,
        f"the fixed-effect design ({n:,} rows x about {width:,} columns)",
        "use fewer or coarser factors in the fixed part, or move a many-level factor into a random-effect term",
    )
