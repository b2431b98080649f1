"""A response with more than two classes: one binary fit per class against the rest (one-vs-rest), as scikit-learn's
``OneVsRestClassifier`` and ``SVC``'s probability estimates for several classes do.

Each binary fit is an ordinary :class:`~bayesvm.results.fit.BSVMFit` of the same formula with the response ``y == k``
(class ``k`` is the positive class).  Probabilities are the binary fits' calibrated ``P(y = k)`` normalised to sum
to one over the classes; the predicted class is the most probable one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..arguments import as_flag
from .base import checked_kind

#: What :meth:`MulticlassFit.predict` gives.
MULTICLASS_KINDS = ("class", "prob", "link")


@dataclass(eq=False)
class MulticlassFit:
    """One-vs-rest fits of a response with more than two classes.

    Attributes
    ----------
    response
        The response column.
    classes
        Its classes, in sorted (or categorical) order.
    fits
        One binary fit per class (class ``k`` against the rest), in ``classes`` order.
    """

    response: str
    classes: tuple
    fits: tuple

    @property
    def formula(self) -> str:
        return self.fits[0].formula

    @property
    def nobs(self) -> int:
        """The rows the fits used (every class's fit against the rest uses the same rows)."""
        return self.fits[0].nobs

    @property
    def fixef(self) -> pd.DataFrame:
        """Posterior means of the fixed effects: one column per class (its fit against the rest)."""
        return pd.DataFrame({label: fit.fixef for label, fit in zip(self.classes, self.fits)})

    def predict(
        self,
        newdata: pd.DataFrame | None = None,
        kind: str = "class",
        include_random: bool = True,
        *,
        type: str | None = None,  # (R's name: refused as Fit.predict refuses it)
    ):
        """``"class"``: the most probable class (a Series; with class weights, the class whose fit against the rest
        has the largest decision value, as liblinear's one-vs-rest decides); ``"prob"``: each class's probability,
        normalised over the classes (a frame, one column per class); ``"link"``: each binary fit's decision value
        ``f`` (a frame)."""
        checked_kind(kind, MULTICLASS_KINDS, type, " for a fit of several classes")
        include_random = as_flag(include_random, "include_random")
        if kind == "link":
            return self._columns(newdata, "link", include_random)
        prob = self._columns(newdata, "prob", include_random)
        prob = prob.div(prob.sum(axis=1), axis=0)
        if kind == "prob":
            return prob
        # with class weights the weights act on the decisions (the probabilities stay the data's): the largest f
        weighted = any(getattr(fit.model, "class_weights", None) is not None for fit in self.fits)
        scores = self._columns(newdata, "link", include_random) if weighted else prob
        labels = np.asarray(self.classes, dtype=object)[np.argmax(scores.to_numpy(), axis=1)]
        return pd.Series(labels, index=prob.index, name=self.response)

    def _columns(self, newdata, kind: str, include_random: bool) -> pd.DataFrame:
        return pd.DataFrame(
            {
                label: fit.predict(newdata, kind=kind, include_random=include_random)
                for label, fit in zip(self.classes, self.fits)
            }  # fmt: skip
        )

    def summary(self, level: float = 0.95, detail: bool = False) -> MulticlassSummary:
        """One summary: the classes and, for each, its fit's fixed effects, variance components and checks."""
        return MulticlassSummary(self, [fit.summary(level=level, detail=detail) for fit in self.fits])

    def to_inference_data(self, draws: int = 1000, seed: int | None = 0, log_likelihood: bool = True) -> dict:
        """One ArviZ object per class, keyed by the class as text: its fit against the rest
        (:meth:`bayesvm.results.base.Fit.to_inference_data`; the binary fits share no parameters, so they are
        not one posterior)."""
        return {
            str(label): fit.to_inference_data(draws=draws, seed=seed, log_likelihood=log_likelihood)
            for label, fit in zip(self.classes, self.fits)
        }

    def save(self, path, key: bytes | str | None = None):
        """Write every class's fit to ``path`` (:mod:`bayesvm.results.storage`)."""
        from .storage import save_fit

        return save_fit(self, path, key)

    def __repr__(self) -> str:
        return f"<MulticlassFit one-vs-rest over {len(self.classes)} classes: {self.formula!r}>"

    def __getattr__(self, name: str):
        """A binary fit's attribute that the classes together do not have (``ranef``, ``check_vb``, ...): an error
        that says where it is, each class's fit against the rest."""
        fits = self.__dict__.get("fits")
        if name.startswith("_") or not fits or not hasattr(type(fits[0]), name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(
            f"{name!r} belongs to each class's fit against the rest: fit.fits[k].{name} for class k of "
            f"{list(self.classes)} (in that order)"
        )


@dataclass(frozen=True, eq=False)
class MulticlassSummary:
    """The per-class summaries of a :class:`MulticlassFit`; ``str()`` prints them as one report."""

    fit: MulticlassFit
    parts: list

    @property
    def fixed(self) -> pd.DataFrame:
        """Every class's fixed-effect table, stacked with the class as the outer index."""
        return pd.concat({label: part.fixed for label, part in zip(self.fit.classes, self.parts)}, names=["class"])

    def __str__(self) -> str:
        classes = ", ".join(repr(label) for label in self.fit.classes)
        head = (
            f"One-vs-rest Bayesian SVM over {len(self.fit.classes)} classes of {self.fit.response!r} ({classes}): "
            "one binary fit per class against the rest; probabilities normalised over the classes"
        )
        sections = [head]
        for label, part in zip(self.fit.classes, self.parts):
            sections.append(f"\n===== class {label!r} against the rest =====\n{part}")
        return "\n".join(sections)

    def _repr_html_(self) -> str:
        return f"<pre>{self}</pre>"
