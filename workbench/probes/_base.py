"""The scoring half shared by the probes: a linear classifier's logits, probabilities, labels."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import expit, softmax
from sklearn.utils.validation import check_is_fitted, validate_data

from workbench.probes._data import to_numpy


class LinearScores:
    """``decision_function``, ``predict_proba`` and ``predict`` from ``coef_`` and ``intercept_``.

    Scores are computed in float64 numpy, so a row's output never depends on the batch it is in.
    """

    classes_: np.ndarray
    coef_: np.ndarray
    intercept_: np.ndarray

    def decision_function(self, X: Any) -> np.ndarray:
        """Logits: ``(n,)`` for two classes (positive class ``classes_[1]``), else ``(n, k)``."""
        check_is_fitted(self)
        X = validate_data(self, to_numpy(X), reset=False, dtype=np.float64)
        scores = X @ self.coef_.T + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, ``(n, n_classes)`` in the order of ``classes_``."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        return softmax(scores, axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row."""
        scores = self.decision_function(X)
        codes = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(1)
        return self.classes_[codes]
