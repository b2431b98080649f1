"""Model matrices built by formulaic's pandas encoder, with every term evaluated by the package's interpreter.

formulaic parses the formula into terms and factors and encodes evaluated factors into columns (contrasts,
interactions, full-rank scoping); its own evaluation of a factor would run the factor's text through Python's
``eval``.  :class:`SafeMaterializer` replaces the two places where a factor meets data: a plain name is looked up
among the data's columns and nowhere else, and any other factor is evaluated by
:func:`bayesvm.formula.interpreter.evaluate_term`.  Before the columns of a term are built, its width (the product
of its factors' levels or columns) is checked against the memory the rows would need, so an interaction of two
factors with thousands of levels is refused instead of exhausting memory.  :func:`materialize` always builds with
this class, whatever materializer a (possibly restored) ``ModelSpec`` names.
"""

from __future__ import annotations

import copy
import math
import threading
import warnings

import numpy as np
import pandas as pd
from formulaic.errors import DataMismatchWarning, FormulaicError
from formulaic.materializers import PandasMaterializer
from formulaic.parser.types import Factor
from formulaic.utils.layered_mapping import LayeredMapping
from formulaic.utils.variables import Variable
from interface_meta import override

from ..errors import BayesvmError, DesignError
from ..memory import check_memory
from .interpreter import evaluate_term

#: Serialises the warning filter :func:`materialize` sets: ``warnings.catch_warnings`` saves and restores the
#: process-wide filter list, so two threads inside it at once could leave one's filter behind.
_FILTER_LOCK = threading.RLock()

#: Bytes a design cell costs while it is built (formulaic's columns, the joined frame, the float array).
BYTES_PER_CELL = 3 * 8.0


class SafeMaterializer(PandasMaterializer):
    """formulaic's pandas materializer whose factors reach only the data's columns and the interpreter's table."""

    REGISTER_NAME = "bayesvm"
    REGISTER_INPUTS = ()  # never chosen by formulaic for data: only :func:`materialize` uses it

    def __init__(self, data, context=None, **params) -> None:
        super().__init__(data, context=None, **params)
        self.layered_context = LayeredMapping(LayeredMapping(self.data_context, name="data"))
        self.refusal: BayesvmError | None = None

    @override
    def _lookup(self, name: str):
        if name not in self.data_context:
            self.refusal = DesignError(f"column {name!r} used in the formula is not in the data")
            raise self.refusal
        return self.data_context[name], {Variable(name, roles=("value",), source="data")}

    @override
    def _evaluate(self, expr: str, metadata, spec):
        try:
            value, used = evaluate_term(
                expr, self.data_context, self.nrows, spec.transform_state, {expr: metadata}, spec
            )
        except BayesvmError as exc:
            self.refusal = exc
            raise
        return value, {Variable(name, roles=("value",), source="data") for name in used}

    @override
    def _build_model_matrix(self, spec, drop_rows):
        rows = max(self.nrows - len(drop_rows), 1)
        for term in spec.formula:
            width = math.prod(self._width(factor, spec) for factor in term.factors)
            check_memory(
                BYTES_PER_CELL * rows * width,
                f"the formula term {str(term)!r} ({rows:,} rows x {width:,} columns)",
                "use fewer or coarser factors in the term, or move a many-level factor into a random-effect term",
            )
        return super()._build_model_matrix(spec, drop_rows)

    def _width(self, factor, spec) -> int:
        """Columns a factor encodes to: its levels if categorical, its columns if a matrix, else one."""
        evaluated = self.factor_cache.get(factor.expr)
        if evaluated is None:
            return 1
        values = evaluated.values
        kind = values.__formulaic_metadata__.kind
        if kind is Factor.Kind.CONSTANT:
            return 1
        wrapped = getattr(values, "__wrapped__", values)
        if kind is Factor.Kind.CATEGORICAL:
            state = spec.encoder_state.get(factor.expr)
            categories = state[1].get("categories") if state and isinstance(state[1], dict) else None
            if categories is not None:
                return max(len(categories), 1)
            if isinstance(wrapped, pd.Series):  # (counted in its own dtype: no conversion to objects)
                return max(int(wrapped.nunique(dropna=True)), 1)
            return max(int(pd.Series(np.asarray(wrapped).ravel()).nunique(dropna=True)), 1)
        if isinstance(wrapped, dict):
            return max(len(wrapped), 1)
        shape = np.shape(wrapped)
        return int(shape[1]) if len(shape) == 2 else 1


def materialize(spec_or_formula, data: pd.DataFrame, what: str, as_matrix: bool = False):
    """The model matrix of ``data`` by a formula (a formulaic ``ModelMatrix``) or by a spec (an array; with
    ``as_matrix``, the ``ModelMatrix``), built by :class:`SafeMaterializer`.

    Raises
    ------
    FormulaError, DesignError, BayesvmError
        A refused term, a column the data lack, a design too large for memory; any formulaic failure as a
        :class:`DesignError` naming ``what``.
    """
    materializer = SafeMaterializer(data)
    try:
        # formulaic's one data warning (levels a spec never saw) as an error; the filter is process-wide, so it names
        # that warning alone and one thread at a time sets and restores it (dask builds partitions on threads)
        with _FILTER_LOCK, warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
            warnings.simplefilter("error", DataMismatchWarning)
            # on a copy of a spec: formulaic updates its state while it materialises, even when that then fails
            spec = spec_or_formula if isinstance(spec_or_formula, str) else copy.deepcopy(spec_or_formula)
            matrix = materializer.get_model_matrix(spec, na_action="raise")
    except BayesvmError:
        raise
    except DataMismatchWarning as exc:
        raise DesignError(f"cannot build the {what} design: {exc}") from None
    except (FormulaicError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        if materializer.refusal is not None:
            raise materializer.refusal from None
        message = str(exc).split("\n")[0]
        raise DesignError(f"cannot build the {what} design: {message}") from None
    if isinstance(spec_or_formula, str) or as_matrix:
        return matrix
    return np.asarray(matrix, dtype=float)
