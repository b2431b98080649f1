"""Out-of-core data: a ``dask.dataframe.DataFrame`` as the ``data`` of ``bsvm()``.

Owns the bridge between dask partitions and the engines.  The formula is materialised per partition
with the ``ModelSpec`` of a prototype design built from the first rows, so every partition gets the same
columns; global quantities (row count, missing values, classes, the standardisation's means and SDs)
come from one reduction over the partitions.  Engines then see per-partition sums
(:meth:`StreamedData.sweep`, full-batch VB), passes that keep a state per partition where the partition is
(:class:`PartitionPasses`, the accurate fit's EP sites) or one loaded partition at a time
(:class:`~bayesvm.engines.batches.PartitionBatches` through :meth:`StreamedData.minibatches`, SVI).  Everything
goes through ``dask.compute`` / ``dask.persist``, so an active ``dask.distributed`` client runs the work on its
cluster unchanged.

Requirements: text predictors or responses must be categorical with known categories
(``ddf.categorize(columns=[...])``) so that every partition codes the same levels.  Random effects: the
levels of each grouping factor are collected over every partition in the same reduction (sorted as in
memory), and each partition's rows carry their codes.  Full-batch VB streams the largest grouping factor as
per-level sums (any number of levels, :mod:`bayesvm.engines.linear.stream_vb`) and the other terms as dense
columns; SVI and the selection priors see every term as dense columns (at most
:data:`bayesvm.model.MAX_DENSE_COLUMNS` coefficients in all).  A ``gp()`` term's basis
(standardisation, inducing locations, centring) is set from the prototype rows.  ``missing="impute"``: a first
pass finds the predictors with missing values and their observed moments (the imputation model's scale and the
placeholders of the prototype, as in memory); the rows' imputed values are drawn and kept beside their partitions
(:mod:`bayesvm.engines.imputation.stream_mi`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .checks.levels import probe_predictors, span_probe_effects, span_products
from .errors import BayesvmError, DataError
from .formula.bars import ParsedFormula
from .formula.design import (
    Design,
    NewDesign,
    bad_mask,
    build_design,
    required_variables,
)
from .formula.groups import group_labels, sorted_group_levels
from .formula.imputation import ColumnGaps, ImputationLayout, check_gaps, imputation_layout, is_categorical
from .formula.response import code_response

#: Rows of the prototype design (taken from the first partition).
PROTOTYPE_ROWS = 1000
#: Engine-ready rows up to this many bytes are persisted (computed once) instead of recomputed per pass.
PERSIST_BYTES = 2e9
#: Partitions loaded on the driver (SVI) are cached up to this many bytes.
DRIVER_CACHE_BYTES = 5e8


def is_dask_frame(data: object) -> bool:
    """A ``dask.dataframe.DataFrame`` (checked without importing dask)."""
    return type(data).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(data, "npartitions")


def _dask():
    try:
        import dask

        return dask
    except ImportError:  # pragma: no cover - only without the extra
        raise BayesvmError("out-of-core data need dask: pip install 'bayesvm[dask]'") from None


@dataclass(frozen=True, eq=False)
class StreamedDesign(Design):
    """A :class:`Design` whose ``X`` holds only the prototype rows; ``y`` has every row."""

    n_rows: int = 0
    column_mean: np.ndarray | None = None
    column_sd: np.ndarray | None = None
    #: grouping factor -> ``(rows, rows of the positive class)`` of each of its levels, over every row
    level_classes: dict | None = None
    #: random-effect term (by position) -> ``(X'X, X'P, diag(P'P))`` over every row for the span check's probes
    #: (:func:`bayesvm.checks.levels.fixed_span_findings`; only the terms it tests)
    span_products: dict | None = None

    @property
    def n(self) -> int:
        return self.n_rows

    def column_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Means and SDs (``ddof=1``) of the columns of X over every row."""
        return self.column_mean, self.column_sd

    def level_counts(self, term) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, rows of the positive class)`` of each level of ``term``'s grouping factor, over every row."""
        rows, positive = self.level_classes[term.group]
        return np.asarray(rows), np.asarray(positive)


@dataclass(frozen=True, eq=False)
class StreamedImputationLayout(ImputationLayout):
    """An :class:`ImputationLayout` whose ``values`` hold only the prototype rows; the observed moments, the counts
    of missing values and of incomplete rows come from the pass over every row."""

    moments: tuple = ((), ())
    counts: tuple = ()
    incomplete: int = 0

    @property
    def observed_mean(self) -> np.ndarray:
        return np.asarray(self.moments[0], dtype=float)

    @property
    def observed_sd(self) -> np.ndarray:
        return np.asarray(self.moments[1], dtype=float)

    @property
    def n_missing(self) -> dict[str, int]:
        return {name: int(c) for name, c in zip(self.variables, self.counts) if c}

    @property
    def incomplete_rows(self) -> int:
        return self.incomplete


def _complete(frame: pd.DataFrame, used: list[str], missing: str) -> pd.DataFrame:
    if missing == "impute":  # the predictors are imputed, the response never is: rows without one are dropped
        return frame.loc[frame[used[0]].notna().to_numpy()]
    if missing != "drop":
        return frame
    keep = np.ones(len(frame), dtype=bool)
    for name in used:
        keep &= ~bad_mask(frame[name])
    return frame.loc[keep]


def _empty_rows(design: Design) -> NewDesign:
    return NewDesign(
        X=np.zeros((0, design.p)),
        codes=tuple(np.zeros(0, dtype=int) for _ in design.re_terms),
        values=tuple(np.zeros((0, term.k)) for term in design.re_terms),
        gp_bases=tuple(np.zeros((0, term.n_basis)) for term in design.gp_terms),
    )


def _partition_rows(frame: pd.DataFrame, design: Design, used: list[str], missing: str) -> tuple[NewDesign, np.ndarray]:
    """``(rows, y)`` of one partition (complete rows for ``missing="drop"``): X, the random-effect codes and
    values (levels of the whole frame) and the ``gp()`` bases."""
    frame = _complete(frame, used, missing)
    if len(frame) == 0:
        return _empty_rows(design), np.zeros(0)
    new = design.rematerialize(frame)
    if new.imputation_values is not None:
        new = replace(new, labels=frame.index)
    return new, design.response.encode(frame[design.parsed.response])


def _partition_summary(frame: pd.DataFrame, design: Design, used: list[str], missing: str) -> dict:
    """Counts of bad values, rows, column sums of X, the response and each grouping factor's levels."""
    bad = {name: int(bad_mask(frame[name]).sum()) for name in used}
    groups = tuple(dict.fromkeys(bar.group for bar in design.parsed.bars))
    if missing == "error" and any(bad.values()):
        X, y, labels = np.zeros((0, design.p)), np.zeros(0), {g: pd.Index([], dtype=object) for g in groups}
    else:
        frame = _complete(frame, used, missing)
        X = design.rematerialize(frame, include_random=False).X if len(frame) else np.zeros((0, design.p))
        y = design.response.encode(frame[design.parsed.response]) if len(frame) else np.zeros(0)
        labels = {g: group_labels(frame, g) for g in groups}
    counts = {g: (pd.Series(labels[g]).value_counts(), pd.Series(labels[g][y > 0]).value_counts()) for g in groups}
    labels = {g: pd.Index(labels[g].unique()) for g in groups}
    layout = design.imputation
    incomplete = (
        0 if layout is None else int(frame[list(dict.fromkeys(layout.source_columns))].isna().any(axis=1).sum())
    )
    return {"bad": bad, "rows": len(y), "sum": X.sum(axis=0), "sumsq": (X * X).sum(axis=0), "y": y, "labels": labels,
            "counts": counts, "incomplete": incomplete}  # fmt: skip


def _partition_gaps(frame: pd.DataFrame, used: list[str]) -> dict:
    """Per predictor of one partition (rows without a response left out): missing values (count, first labels) and
    what the imputation needs of the observed ones (a numeric column's count, sum, sum of squares and infinities; a
    categorical column's level counts)."""
    frame = _complete(frame, used, "impute")
    out = {}
    for name in used[1:]:
        column = frame[name]
        bad = bad_mask(column)
        fact = {"missing": int(bad.sum()), "rows": frame.index[bad][:5].tolist(), "categorical": is_categorical(column)}
        if fact["categorical"]:
            fact["levels"] = column.value_counts(dropna=True)
        else:
            values = column.to_numpy(dtype=float, na_value=np.nan)
            finite = values[np.isfinite(values)]
            fact.update(infinite=frame.index[np.isinf(values)][:5].tolist(), observed=finite.size, sum=finite.sum(),
                        sumsq=float(finite @ finite))  # fmt: skip
        out[name] = fact
    return out


def _gaps_of(name: str, parts: list[dict]) -> tuple[ColumnGaps, tuple[float, float] | None, pd.Series | None]:
    """One predictor's :class:`ColumnGaps` over every partition, with its observed mean and SD (``ddof=1``; a numeric
    column) or its observed level counts (a categorical one)."""
    facts = [part[name] for part in parts]
    missing = sum(f["missing"] for f in facts)
    rows = [r for f in facts for r in f["rows"]][:5]
    if facts[0]["categorical"]:
        levels = pd.concat([f["levels"] for f in facts]).groupby(level=0, observed=False).sum()
        levels = levels[levels > 0]
        return ColumnGaps(name, missing, rows, True, int(levels.size)), None, levels
    observed = sum(f["observed"] for f in facts)
    total, total_sq = sum(f["sum"] for f in facts), sum(f["sumsq"] for f in facts)
    infinite = tuple(r for f in facts for r in f["infinite"])[:5]
    mean = total / observed if observed else np.nan
    var = (total_sq - observed * mean**2) / (observed - 1) if observed > 1 else np.nan
    gaps = ColumnGaps(name, missing, rows, False, 0, infinite, observed)
    return gaps, (mean, float(np.sqrt(max(var, 0.0))) if np.isfinite(var) else np.nan), None


def _with_levels(design: Design, frame: pd.DataFrame, summaries) -> Design:
    """The prototype's random-effect terms with the levels of the whole frame (codes of the prototype rows)."""
    terms = []
    for term in design.re_terms:
        seen = pd.Index([]).append([s["labels"][term.bar.group] for s in summaries]).unique()
        levels = sorted_group_levels(pd.Index(seen.astype(str)))
        terms.append(replace(term, levels=levels, codes=levels.get_indexer(group_labels(frame, term.bar.group))))
    return replace(design, re_terms=tuple(terms))


@dataclass(frozen=True, eq=False)
class StreamedData:
    """The dask frame with what is needed to turn any partition into engine inputs."""

    frame: object
    design: StreamedDesign
    used: tuple[str, ...]
    missing: str
    counts: tuple[int, ...]

    def parts(self, transform, whole_levels: tuple[str, ...] = ()) -> list:
        """One dask task per partition giving ``(transform(X), y)``, the engine-ready rows.

        When every row fits in :data:`PERSIST_BYTES` the tasks are persisted (computed once and kept in
        the cluster's memory, which ``dask.distributed`` spills to disk under pressure), as dask advises
        for data that an algorithm visits many times; otherwise each visit recomputes its partition.
        ``whole_levels``: grouping columns whose every level's rows must lie in one partition (the frame is
        shuffled on them first).
        """
        dask = _dask()
        design, used, missing = self.design, list(self.used), self.missing

        def rows(part):
            new, y = _partition_rows(part, design, used, missing)
            return transform(new), y

        # (a task-based shuffle: dask.distributed's peer-to-peer one logs two warnings per shuffle)
        frame = self.frame.shuffle(on=list(whole_levels), shuffle_method="tasks") if whole_levels else self.frame
        tasks = [dask.delayed(rows)(part) for part in frame.to_delayed()]
        if self.persists:
            tasks = list(dask.persist(*tasks))
        return tasks

    @property
    def persists(self) -> bool:
        """Whether the engine rows are persisted (:meth:`parts`): every row fits in :data:`PERSIST_BYTES`."""
        return 8.0 * self.design.n * self.design.p <= PERSIST_BYTES

    @staticmethod
    def map(parts: list, func, *args) -> list:
        """``func(D, y, *args)`` on every partition's rows (computed where dask runs); the list of results.  Each
        argument enters the graph once, shared by every partition's task (a posterior broadcast to the workers once
        per pass, not once per partition)."""
        dask = _dask()
        shared = [dask.delayed(arg) for arg in args]
        return list(
            dask.compute(*[dask.delayed(lambda rows, *a: func(rows[0], rows[1], *a))(part, *shared) for part in parts])
        )

    def sweep(self, transform):
        """``pass_(func, *args)``: :meth:`map` over the partitions' rows as ``transform`` makes them (one pass over
        the data per call: the full-batch engines' sweep)."""
        parts = self.parts(transform)
        return lambda func, *args: self.map(parts, func, *args)

    def passes(self, transform, whole_levels: tuple[str, ...] = ()) -> PartitionPasses:
        """:class:`PartitionPasses` over the partitions' rows as ``transform`` makes them (``whole_levels``: as
        :meth:`parts`): the accurate fit's input."""
        return PartitionPasses(self.parts(transform, whole_levels), self.persists)

    def minibatches(self, transform, size: int):
        """``batches(rng)``: minibatches of ``size`` rows drawn partition by partition
        (:class:`bayesvm.engines.batches.PartitionBatches`) from the rows as ``transform`` makes them: the stochastic
        engines' input."""
        from .engines.batches import PartitionBatches

        parts = self.parts(transform)
        return lambda rng: PartitionBatches(self.loader(parts), self.counts, size, rng)

    def loader(self, parts: list):
        """``load(k)``: the rows of partition ``k`` on the driver; kept there (LRU) while they fit in
        :data:`DRIVER_CACHE_BYTES`, so that small data are not fetched again at every visit."""
        dask = _dask()
        budget = int(DRIVER_CACHE_BYTES // max(8.0 * self.design.p * max(self.counts), 1.0))
        return functools.lru_cache(maxsize=max(budget, 1))(lambda k: dask.compute(parts[k])[0])


@dataclass(frozen=True, eq=False)
class PartitionPasses:
    """Passes over the partitions' engine rows (``parts``, :meth:`StreamedData.parts`), with or without a state per
    partition kept where the partition is.

    A state (e.g. EP's sites of the partition's rows) is persisted: on a ``dask.distributed`` cluster it stays in
    the memory of the worker that computed it (spilled to disk under pressure) and only its handle comes back;
    without a cluster it is held in this process.  It is freed when no handle refers to it.
    """

    parts: list
    #: whether rows derived from these (:meth:`derived`) are persisted too
    persist: bool = True

    def sweep(self, func, *args) -> list:
        """``func(rows, y, *args)`` of every partition, gathered (:meth:`StreamedData.map`)."""
        return StreamedData.map(self.parts, func, *args)

    def carry(self, func, states: list | None, *args) -> tuple[list, list]:
        """``func(rows, y, state, *args) -> (new state, result)`` on every partition (``states=None``: each state
        None): the new states persisted where they were computed (their handles) and the results gathered."""
        dask = _dask()
        states = [None] * len(self.parts) if states is None else states
        made = dask.persist(*self._tasks(func, states, args, nout=2))
        results = dask.compute(*[pair[1] for pair in made])
        return [pair[0] for pair in made], list(results)

    def derived(self, func, states: list, *args) -> PartitionPasses:
        """Passes over the rows ``func(rows, y, state, *args) -> (rows', y')`` of every partition (e.g. the design rows
        with one imputation filled in), computed beside the partitions and persisted there as these are."""
        tasks = self._tasks(func, states, args)
        return PartitionPasses(list(_dask().persist(*tasks)) if self.persist else tasks, self.persist)

    def sweep_states(self, func, states: list, *args) -> list:
        """``func(rows, y, state, *args)`` of every partition, gathered."""
        return list(_dask().compute(*self._tasks(func, states, args)))

    def _tasks(self, func, states: list, args: tuple, nout: int | None = None) -> list:
        """One task per partition, ``func(rows, y, state, *args)``; each argument enters the graph once."""
        dask = _dask()
        shared = [dask.delayed(arg) for arg in args]
        step = dask.delayed(lambda rows, state, *a: func(rows[0], rows[1], state, *a), nout=nout)
        return [step(part, state, *shared) for part, state in zip(self.parts, states)]


def reduce_partitions(results: list) -> object:
    """Sum per-partition results (arrays, floats or tuples of them)."""
    total = results[0]
    for item in results[1:]:
        total = tuple(a + b for a, b in zip(total, item)) if isinstance(total, tuple) else total + item
    return total


def _prototype_rows(ddf, head: pd.DataFrame, used: list[str], gaps: ImputationGaps | None = None) -> pd.DataFrame:
    """Up to :data:`PROTOTYPE_ROWS` complete rows for the prototype design: the first partition's, then the next
    partitions' while fewer than 2 (a first partition of missing values only is fine); with ``gaps``
    (``missing="impute"``) the imputed columns' missing values are first filled with their placeholders."""

    def complete(frame):
        frame = frame[used] if gaps is None else gaps.filled(_complete(frame[used], used, "impute"))
        return _complete(frame, used, "drop")

    proto = complete(head)
    for k in range(1, ddf.npartitions):
        if len(proto) >= 2:
            break
        more = complete(ddf.partitions[k].compute())
        proto = pd.concat([proto, more.head(PROTOTYPE_ROWS)])
    if len(proto) < 2:
        raise DataError(
            f"the dask frame has fewer than 2 rows complete in {', '.join(map(repr, used))}: nothing to fit"
        )
    return proto.copy()


def _span_products(ddf, design: Design, used: list[str], missing: str, n: int) -> dict:
    """The span check's cross-products (:func:`bayesvm.checks.levels.span_products`) summed over the partitions, for
    the terms it tests (few levels beside many fixed columns; none, and no pass over the data, otherwise)."""
    effects = span_probe_effects(design.re_terms, design.p, n)
    if not effects:
        return {}
    dask = _dask()
    parts = dask.compute(
        *[dask.delayed(_partition_span)(part, design, used, missing, effects) for part in ddf.to_delayed()]
    )
    return {index: tuple(sum(part[index][j] for part in parts) for j in range(3)) for index in effects}


def _partition_span(frame: pd.DataFrame, design: Design, used: list[str], missing: str, effects: dict) -> dict:
    """One partition's cross-products for each tested term (its rows with a finite fixed-effect row)."""
    rows, _ = _partition_rows(frame, design, used, missing)
    finite = np.isfinite(rows.X).all(axis=1)
    return {
        index: span_products(rows.X[finite], probe_predictors(rows.codes[index][finite], rows.values[index][finite], b))
        for index, b in effects.items()
    }


def _level_classes(design: Design, summaries) -> dict:
    """Grouping factor -> ``(rows, rows of the positive class)`` per level (in the terms' level order), added over
    the partitions' counts."""
    out = {}
    for term in design.re_terms:
        if term.group in out:
            continue
        for_term = [[s["counts"][term.bar.group][k] for s in summaries] for k in (0, 1)]
        added = [pd.concat(parts).groupby(level=0).sum() for parts in for_term]
        out[term.group] = tuple(part.reindex(term.levels, fill_value=0).to_numpy(dtype=np.int64) for part in added)
    return out


def _present_values(frame: pd.DataFrame, column: str) -> np.ndarray:
    """The distinct non-missing values of one partition's column (a per-partition reduction: dask's ``unique``
    shuffles, and ``dask.distributed`` logs each shuffle)."""
    return np.asarray(frame[column].dropna().unique())


@dataclass(frozen=True)
class ImputationGaps:
    """What the pass over the data found for ``missing="impute"``: the predictors to impute, and per predictor its
    :class:`ColumnGaps`, observed mean and SD (a numeric column) or observed level counts (a categorical one)."""

    impute: tuple[str, ...]
    gaps: dict
    moments: dict
    levels: dict

    def placeholder(self, name: str) -> object:
        """What a missing value of ``name`` is replaced by while the design is built: the observed mean, or the most
        frequent level (as in memory)."""
        return self.moments[name][0] if self.levels[name] is None else _most_frequent(self.levels[name])

    def filled(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with the imputed columns' missing values at their placeholders."""
        frame = frame.copy()
        for name in self.impute:
            value, column = self.placeholder(name), frame[name]
            if isinstance(column.dtype, pd.CategoricalDtype) and value not in column.cat.categories:
                column = column.cat.add_categories([value])
            frame[name] = column.where(column.notna(), value)
        return frame


def _imputation_gaps(parsed: ParsedFormula, ddf, used: list[str], head: pd.DataFrame) -> ImputationGaps:
    """One pass over the partitions for ``missing="impute"``: the predictors with missing values, each checked as in
    memory (:func:`bayesvm.formula.imputation.check_gaps`, the same messages), with the observed moments or level counts
    of every predictor."""
    dask = _dask()
    parts = dask.compute(*[dask.delayed(_partition_gaps)(part, used) for part in ddf.to_delayed()])
    gaps, moments, levels = {}, {}, {}
    for name in used[1:]:
        gaps[name], moments[name], levels[name] = _gaps_of(name, parts)
    bars = [v for bar in parsed.bars for v in required_variables(bar.expr, head, "data")]
    groups = [v for bar in parsed.bars for v in bar.group]
    gp_inputs = [v for spec in parsed.gp_terms for v in spec.variables]
    impute = check_gaps([gap for gap in gaps.values() if gap.n_missing], groups, bars, gp_inputs)
    return ImputationGaps(tuple(impute), gaps, moments, levels)


def _with_imputation(prototype: Design, proto: pd.DataFrame, found: ImputationGaps) -> Design:
    """The prototype with the imputation layout of ``missing="impute"`` (unchanged without missing predictors): the
    in-memory layout of the prototype's columns, with every imputation variable's observed moments over all rows."""
    if not found.impute:
        return prototype
    layout = imputation_layout(prototype.spec, proto, list(found.impute),
                               lambda expr: required_variables(expr, proto, "data"), prototype.X,
                               prototype.x_names)  # fmt: skip
    mean, sd, counts = [], [], []
    for variable, source, column in zip(layout.variables, layout.source_columns, layout.x_columns):
        counts.append(found.gaps[source].n_missing)
        if variable == source:
            mean.append(found.moments[source][0])
            sd.append(found.moments[source][1])
            continue
        observed = found.levels[source]  # an indicator column: its value at each observed level, weighted by the counts
        rows = pd.concat([proto.iloc[[0]]] * observed.size, ignore_index=True)
        rows[source] = pd.Series(observed.index, dtype=proto[source].dtype)
        x = prototype.rematerialize(rows, include_random=False).X[:, column]
        weights = observed.to_numpy(dtype=float)
        m = float(weights @ x / weights.sum())
        mean.append(m)
        sd.append(float(np.sqrt(max(weights @ (x - m) ** 2, 0.0) / max(weights.sum() - 1.0, 1.0))))
    sd = np.asarray(sd)
    sd = np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)
    placeholders = tuple((source, found.placeholder(source)) for source, _ in layout.placeholders)
    fields = {f: getattr(layout, f) for f in ImputationLayout.__dataclass_fields__}
    fields.update(placeholders=placeholders)
    streamed = StreamedImputationLayout(**fields, moments=(np.asarray(mean), sd), counts=tuple(counts))
    return replace(prototype, imputation=streamed)


def _most_frequent(counts: pd.Series) -> object:
    """The most frequent level (the first in the levels' order among ties, as ``Series.mode``)."""
    top = counts[counts == counts.max()]
    return top.sort_index().index[0]


def build_streamed(parsed: ParsedFormula, ddf: object, positive: object | None, missing: str) -> StreamedData:
    """Prototype design, global checks and the full response vector for a dask frame."""
    dask = _dask()
    # the first partition's first rows, by a task of pandas' head (dask's head warns, in the worker's process where no
    # filter of the caller reaches it, when the partition is shorter)
    head = dask.compute(dask.delayed(pd.DataFrame.head)(ddf.to_delayed()[0], PROTOTYPE_ROWS))[0]
    if len(head) == 0:
        raise DataError("the first partition of the dask frame is empty")
    used = list(
        dict.fromkeys(
            [
                parsed.response,
                *required_variables(parsed.fixed, head, "data"),
                *(v for bar in parsed.bars for v in required_variables(bar.expr, head, "data")),
                *(v for bar in parsed.bars for v in bar.group),
                *(v for spec in parsed.gp_terms for v in spec.variables),
            ]
        )
    )
    missing_cols = [c for c in used if c not in ddf.columns]
    if missing_cols:
        build_design(parsed, head, positive=positive, missing="drop", rank="keep")  # raises naming the column
    for name in used:
        dtype = ddf.dtypes[name]
        if isinstance(dtype, pd.CategoricalDtype):
            if not ddf[name].cat.known:
                raise DataError(
                    f"column {name!r} is categorical with unknown categories in the dask frame; call "
                    f"ddf = ddf.categorize(columns=[{name!r}]) first so every partition codes the same levels"
                )
        elif not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
            raise DataError(
                f"column {name!r} holds text; call ddf = ddf.categorize(columns=[{name!r}]) first so that every "
                "partition codes the same levels"
            )
    response = parsed.response
    if isinstance(ddf.dtypes[response], pd.CategoricalDtype):
        levels = pd.Series(pd.Categorical(ddf.dtypes[response].categories, categories=ddf.dtypes[response].categories))
    else:
        seen = dask.compute(*[dask.delayed(_present_values)(part, response) for part in ddf.to_delayed()])
        levels = pd.Series(np.sort(pd.unique(np.concatenate(seen))))
    coding = code_response(levels, response, positive)
    # prototype: complete rows of the first partitions, with every class present so that the design can be built
    gaps = _imputation_gaps(parsed, ddf, used, head) if missing == "impute" else None
    proto = _prototype_rows(ddf, head, used, gaps)
    proto[response] = np.resize(levels.to_numpy(), len(proto))
    if isinstance(head[response].dtype, pd.CategoricalDtype):
        proto[response] = pd.Categorical(proto[response], categories=head[response].dtype.categories)
    prototype = build_design(parsed, proto, positive=positive, missing="error", rank="keep")
    prototype = replace(prototype, response=coding)
    if gaps is not None:
        prototype = _with_imputation(prototype, proto, gaps)
    summaries = dask.compute(
        *[dask.delayed(_partition_summary)(part, prototype, used, missing) for part in ddf.to_delayed()]
    )
    bad = {name: sum(s["bad"][name] for s in summaries) for name in used}
    bad = {name: count for name, count in bad.items() if count}
    if missing == "impute":  # (only the rows without a response are dropped)
        bad = {response: bad[response]} if response in bad else {}
        incomplete = sum(s["incomplete"] for s in summaries)
        if prototype.imputation is not None:
            prototype = replace(prototype, imputation=replace(prototype.imputation, incomplete=incomplete))
    if bad and missing == "error":
        detail = ", ".join(f"{name!r}: {count}" for name, count in bad.items())
        raise DataError(
            f"data has missing or non-finite values in {detail} (use missing='drop' to fit on complete cases)"
        )
    counts = tuple(s["rows"] for s in summaries)
    n = sum(counts)
    if n < 2:
        raise DataError("fewer than 2 complete rows in the dask frame")
    y = np.concatenate([s["y"] for s in summaries])
    prototype = _with_levels(prototype, proto, summaries)
    total = sum(s["sum"] for s in summaries)
    total_sq = sum(s["sumsq"] for s in summaries)
    fields = {f: getattr(prototype, f) for f in Design.__dataclass_fields__}
    fields.update(y=y, row_index=pd.RangeIndex(n), n_dropped=bad)
    sd = np.sqrt(np.maximum(total_sq - total**2 / n, 0.0) / (n - 1))
    design = StreamedDesign(**fields, n_rows=n, column_mean=total / n, column_sd=sd,
                            level_classes=_level_classes(prototype, summaries),
                            span_products=_span_products(ddf, prototype, used, missing, n))  # fmt: skip
    return StreamedData(frame=ddf, design=design, used=tuple(used), missing=missing, counts=counts)
