"""Class weights: each row's hinge loss counted ``omega_{y_i}`` times (scikit-learn's ``class_weight``).

The weighted pseudo-likelihood is ``prod_i exp(-2 omega_i max(0, 1 - y_i f_i))``, ``omega_i`` the weight of row
``i``'s class.  With fixed weights it is the classical SVM objective ``sum_i C omega_i hinge_i + ||beta||^2 / 2``
that scikit-learn's ``SVC(class_weight=...)`` solves; ``"balanced"`` gives class ``k`` the weight
``n / (2 n_k)`` (scikit-learn's rule), so each class carries half of the total loss.

Every engine uses the identity ``omega max(0, 1 - y f) = max(0, 1 - y g)`` with ``g = omega f + (1 - omega) y``
(``y^2 = 1``): a weighted row is an unweighted row whose design row is scaled by ``omega`` and whose predictor is
offset by ``(1 - omega) y`` (:func:`bayesvm.engines.augmentation.weighted_predictor`).  Under the Polson-Scott
augmentation of that row, ``q(a_i)`` is ``GIG(1/2, 1, omega_i^2 e_i)`` with ``e_i = E[(1 - y_i f_i)^2]``, so the
row enters ``q(theta)``'s precision with ``omega_i^2 E[1/a_i] = omega_i e_i^{-1/2}`` and its linear term with
``y_i omega_i (1 + e_i^{-1/2})``: the unweighted updates with every row's terms multiplied by ``omega_i``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import BayesvmError


class ClassWeightError(BayesvmError):
    """A ``class_weight`` that names no class of the response, or a weight that is not a positive number."""


@dataclass(frozen=True)
class ClassWeights:
    """The weight of each class, resolved against the training response (an inert record).

    Attributes
    ----------
    negative, positive
        The weights of the classes coded -1 and +1.
    labels
        The two classes as the data spell them, ``(negative, positive)``.
    balanced
        Whether the weights came from ``class_weight="balanced"`` (``n / (2 n_k)`` on the training rows).
    """

    negative: float
    positive: float
    labels: tuple
    balanced: bool = False

    def rows(self, y: np.ndarray) -> np.ndarray:
        """Each row's weight ``omega_i`` for responses ``y`` in {-1, +1}."""
        return np.where(np.asarray(y) > 0, self.positive, self.negative)

    def describe(self) -> str:
        """One line for ``summary()``: each class with its weight."""
        how = "balanced" if self.balanced else "given"
        return (
            f"class weights ({how}): {self.labels[0]!r}: {self.negative:.4g}, {self.labels[1]!r}: {self.positive:.4g}; "
            "the hinge loss of each row is counted its class's weight"
        )


def resolve_class_weight(class_weight: object, y: np.ndarray, labels: tuple) -> ClassWeights | None:
    """The weights ``class_weight`` asks for on the training responses ``y`` (in {-1, +1}) of classes ``labels``
    (``(negative, positive)``, as the data spell them).

    ``None``: no weights (every row 1).  ``"balanced"``: ``n / (2 n_k)``.  A mapping from class to weight, keyed by
    the classes as the data spell them (or as text, as a command line passes them); a class it leaves out weighs 1.
    Raises :class:`ClassWeightError` for a key that is not a class of the response or a weight that is not a positive
    finite number.
    """
    if class_weight is None:
        return None
    y = np.asarray(y)
    labels = tuple(label.item() if isinstance(label, np.generic) else label for label in labels)  # (as shown)
    if isinstance(class_weight, str):
        if class_weight != "balanced":
            raise ClassWeightError(f"class_weight must be None, 'balanced' or a mapping of class to weight, got "
                                   f"{class_weight!r}")  # fmt: skip
        n_neg, n_pos = int(np.sum(y < 0)), int(np.sum(y > 0))
        if min(n_neg, n_pos) == 0:
            raise ClassWeightError("class_weight='balanced' needs both classes among the training rows")
        n = n_neg + n_pos
        return ClassWeights(n / (2.0 * n_neg), n / (2.0 * n_pos), tuple(labels), balanced=True)
    if not isinstance(class_weight, Mapping):
        raise ClassWeightError(
            f"class_weight must be None, 'balanced' or a mapping of class to weight, got {type(class_weight).__name__}"
        )
    weights = [1.0, 1.0]
    for key, value in class_weight.items():
        side = _class_of(key, labels)
        if side is None:
            raise ClassWeightError(
                f"class_weight names {key!r}, which is not a class of the response; the classes are "
                f"{labels[0]!r} and {labels[1]!r}"
            )
        weights[side] = _positive_weight(key, value)
    return ClassWeights(weights[0], weights[1], tuple(labels))


def _class_of(key: object, labels: tuple) -> int | None:
    """0 or 1: which of ``labels`` the key names (equal, else equal as text), or None."""
    for side, label in enumerate(labels):
        try:
            if bool(key == label):
                return side
        except (TypeError, ValueError):
            pass
    for side, label in enumerate(labels):
        if str(key) == str(label):
            return side
    return None


def _positive_weight(key: object, value: object) -> float:
    """``value`` as a positive finite float, else :class:`ClassWeightError` naming the class."""
    if isinstance(value, bool):
        raise ClassWeightError(f"class_weight[{key!r}] must be a positive number, got {value!r}")
    try:
        weight = float(value)
    except (TypeError, ValueError):
        raise ClassWeightError(f"class_weight[{key!r}] must be a positive number, got {value!r}") from None
    if not (np.isfinite(weight) and weight > 0):
        raise ClassWeightError(f"class_weight[{key!r}] must be a positive finite number, got {value!r}")
    return weight
