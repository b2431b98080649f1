"""Which variational fit a call with ``vb=None`` runs: the accurate fit where it applies and pays, mean-field VB
elsewhere, each choice with the reason ``summary()`` prints."""

from __future__ import annotations

from ..model.problems import PENALTY_SOURCE

#: ``vb=None`` fits the accurate VB up to this many rows; beyond, mean-field (the accurate fit costs 20-60 mean-field
#: fits, one EP fit per node of its lattice; its cost and its agreement with a long Gibbs run at this size are in
#: ``benchmarks/RESULTS.md``, section ``accurate_scale``), except a learned penalty with one other variance, which
#: :func:`default_penalty_from_slopes` keeps accurate where its check allows (and which, below, takes the penalty out
#: of a lattice of three or more dimensions).
AUTO_ACCURATE_MAX_ROWS = 40_000
#: ... and up to this many where a single variance hyperparameter is integrated (one random-effect variance and a
#: fixed penalty, or the learned penalty alone; or a learned penalty integrated from the slopes,
#: :func:`default_penalty_from_slopes`): its lattice is a line, about 25 EP fits (9 nodes for a variance of 1,000
#: levels or more, :func:`bayesvm.engines.hyper_grid.line_nodes`) where two hyperparameters take about 150.
#: Its cost at this size, and how far mean-field VB's variance and fixed effects lie from it, are in
#: ``benchmarks/RESULTS.md``, section ``accurate_scale``.
AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER = 1_000_000
#: A selection prior's accurate fit (EP with a site per slope) is the default up to this many rows (with a single
#: variance hyperparameter; ``AUTO_ACCURATE_MAX_ROWS`` with more).
AUTO_ACCURATE_SELECTION_MAX_ROWS = 300_000


def default_vb(problem) -> tuple[str, str | None]:
    """The variational fit ``vb=None`` chooses, and why it is not the accurate one (``None`` if it is).

    The accurate fit (EP integrated over the variance components) is the default wherever it
    applies; mean-field VB where it does not (more than six variance hyperparameters), on the sparse
    path (several large grouping factors, where each EP sweep is a sparse factorisation) and above
    ``AUTO_ACCURATE_MAX_ROWS`` rows (``AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER`` with a single variance
    hyperparameter).
    """
    from .hyperparameters import Hyperparameters
    from .linear.ep import MAX_HYPERPARAMETERS

    if problem.is_sparse:
        return "meanfield", (
            "several large grouping factors (sparse path), where the accurate fit is a sparse EP fit at each node of "
            "its lattice over the variance parameters (hundreds of nodes with three of them): many times this fit's "
            "time"
        )
    size = Hyperparameters(problem.components).size
    if size <= 1 and problem.n > AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER:
        return "meanfield", f"more than {AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER:,} rows"
    if size > 1 and problem.n > AUTO_ACCURATE_MAX_ROWS:
        return "meanfield", f"more than {AUTO_ACCURATE_MAX_ROWS:,} rows with {size} variance hyperparameters"
    if size > MAX_HYPERPARAMETERS:
        return "meanfield", f"more than {MAX_HYPERPARAMETERS} variance hyperparameters"
    return "accurate", None


def default_penalty_from_slopes(problem) -> bool:
    """Whether ``vb=None`` (and ``vb="accurate"``) first tries the accurate fit with the learned penalty's variance
    integrated from the slopes' posterior (:mod:`bayesvm.engines.linear.penalty_from_slopes`), whose EP lattice spans
    the other variance parameters alone (one dimension fewer): the learned penalty on the dense path with

    * one other variance parameter, past ``AUTO_ACCURATE_MAX_ROWS`` rows and up to
      ``AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER``: its lattice is a line, which costs what the one-hyperparameter fit
      does (below, the lattice over both, about 150 EP fits, is kept);
    * two or more other variance parameters (two random-effect terms, a correlated term; at most
      ``MAX_HYPERPARAMETERS`` in all, the accurate fit's scope), up to ``AUTO_ACCURATE_MAX_ROWS`` rows: each dimension
      the lattice loses saves several times its EP fits (the cost beside the whole lattice's is in
      ``benchmarks/RESULTS.md``, ``penalty_from_slopes``).

    It is used only where its check shows that the slopes' posterior barely depends on the penalty; else ``vb=None``
    is the whole lattice where :func:`default_vb` chooses it and mean-field VB past the rows (``summary()`` saying
    why), and ``vb="accurate"`` the whole lattice."""
    from .hyperparameters import Hyperparameters
    from .linear.ep import MAX_HYPERPARAMETERS
    from .linear.penalty_from_slopes import penalty_index

    if problem.is_sparse or penalty_index(problem) is None:
        return False
    size = Hyperparameters(problem.components).size
    if size == 2:
        return AUTO_ACCURATE_MAX_ROWS < problem.n <= AUTO_ACCURATE_MAX_ROWS_ONE_HYPERPARAMETER
    return 2 < size <= MAX_HYPERPARAMETERS and problem.n <= AUTO_ACCURATE_MAX_ROWS


def default_selection_vb(model) -> tuple[str, str | None]:
    """The fit ``vb=None`` chooses for a selection prior, and why it is not the accurate one (``None`` if it is or
    where mean-field is the family's default without a caveat).

    Laplace-zero: the accurate fit (EP with a site per slope, :mod:`bayesvm.engines.selection.ep`) where
    :func:`default_vb` would choose it and there are at most :data:`AUTO_ACCURATE_SELECTION_MAX_SLOPES` penalised
    slopes; if EP fails or does not converge, mean-field VB, and ``summary()`` says so.  There EP's inclusion
    probabilities are far closer to a long Gibbs run's than mean-field VB's (``python -m benchmarks.selection_accuracy``);
    with many correlated slopes EP is slow and often does not converge, so mean-field VB stays the default there.
    Spike-and-slab and the lasso: mean-field VB (Carbonetto & Stephens' spike-and-slab factors are the closer
    approximation there).
    """
    from .selection.laws import law_of

    if not law_of(model.prior).accurate_by_default:
        return "meanfield", None
    problem = model.problem()
    engine, why = default_vb(problem)
    if engine != "accurate":
        return engine, why
    if problem.n > AUTO_ACCURATE_SELECTION_MAX_ROWS:
        return "meanfield", f"Laplace-zero selection on more than {AUTO_ACCURATE_SELECTION_MAX_ROWS:,} rows"
    slopes = int(model.penalized.sum())
    if slopes > AUTO_ACCURATE_SELECTION_MAX_SLOPES:
        return "meanfield", (
            f"Laplace-zero selection over {slopes} slopes, more than {AUTO_ACCURATE_SELECTION_MAX_SLOPES}: with many "
            "correlated slopes EP is slow and often does not converge"
        )
    return "accurate", None


#: ``prior=LaplaceZero()`` with ``vb=None`` fits by EP up to this many penalised slopes (:func:`default_selection_vb`).
AUTO_ACCURATE_SELECTION_MAX_SLOPES = 12


def default_mi_vb(problem) -> tuple[str, str | None]:
    """The fit ``vb=None`` chooses for each completed data set of multiple imputation, and why it is not the
    accurate one (``None`` if it is).

    The accurate fit where :func:`default_vb` would choose it, the only variance hyperparameter is a learned
    penalty (or there is none) and there are at most :data:`AUTO_ACCURATE_MI_MAX_ROWS` rows: then each
    completed data set costs one EP fit per node of a one-dimensional lattice, and mean-field's intervals would be
    too narrow.  With random-effect or ``gp()`` terms each completed data set is a lattice over their variances too,
    and on more rows EP needs more sweeps per node, so mean-field VB there, and ``summary()`` says why.
    """
    engine, why = default_vb(problem)
    if engine != "accurate":
        return engine, why
    if any(comp.source != PENALTY_SOURCE for comp in problem.components):
        return "meanfield", (
            "multiple imputation with random-effect or gp() terms: an accurate fit of every completed data set, each "
            "a lattice over their variances, would take minutes"
        )
    if problem.n > AUTO_ACCURATE_MI_MAX_ROWS:
        return "meanfield", (
            f"multiple imputation on more than {AUTO_ACCURATE_MI_MAX_ROWS:,} rows: an accurate fit of every completed "
            "data set costs 10-20 times as much"
        )
    return "accurate", None


def default_imputation(model, method: str, vb: str | None) -> str:
    """The imputation model ``imputation="auto"`` chooses: the paper's joint model (Luts & Ormerod 2014, section 3.3)
    wherever it applies, else multiple imputation.

    Chosen on held-out predictions (``python -m benchmarks.imputation_default``: 5-fold log loss on HouseVotes84,
    Pima.tr2, BreastCancer and acath, the joint model as good as or better than multiple imputation on each and far
    better on the survey of y/n votes, where imputations drawn given the class make the completed data nearly
    separable and the learned penalty then lets the coefficients grow).  Multiple imputation where the joint model
    does not apply (``vb="accurate"``, ``method="svi"``, a selection prior, the sparse layout) and for Gibbs, whose
    chains can settle in different modes of the joint model (an imputed column's coefficient pulled either way by the
    unnormalised pseudo-likelihood), which multiple imputation does not have.
    """
    if method != "vb" or vb == "accurate" or model.prior is not None or model.sparse:
        return "mi"
    return "joint"


#: ``missing="impute"`` with ``vb=None`` fits each completed data set by the accurate VB up to this many rows
#: (:func:`default_mi_vb`).
AUTO_ACCURATE_MI_MAX_ROWS = 1_000
