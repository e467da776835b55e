"""Detectors of compromised agents' messages, with the scikit-learn estimator contract.

Hyperparameters only in ``__init__``; ``fit`` returns ``self``; learned state ends in ``_``;
``decision_function`` is an anomaly score (higher: more likely compromised); ``predict`` gives
0/1; ``score(X, y)`` is the F1 of ``predict``.

* :class:`PrototypeDetector` (AcMAS): the prototype is the normalized centroid of the benign
  messages' normalized activations; a message's score is its cosine distance to the prototype,
  flagged above the ``quantile`` of the benign calibration distances. With ``update="moving"``
  (the paper's synchronous mode) the prototype follows each round: after a round is scored it
  becomes ``normalize(momentum * p + (1 - momentum) * mean of the round's unflagged messages)``;
  with ``update="fixed"`` (asynchronous mode, no round boundary) it stays as fitted.
* :class:`MahalanobisDetector`: unsupervised; distance to the benign mean under a Ledoit-Wolf
  covariance (:class:`sklearn.covariance.LedoitWolf`), same quantile threshold.
* :class:`TextMajorityDetector`: the text-level baseline; a message is flagged when its answer
  disagrees with the majority answer of its group (a sync round's answers, or in async the answers
  to the task posted before it). ``X`` is an ``(n, 2)`` array ``(group, answer)`` in event order.
The supervised linear probe is :class:`workbench.probes.LinearProbe` itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import f1_score
from sklearn.utils.validation import check_is_fitted

from workbench.errors import DetectorError


def _normalize(X: np.ndarray) -> np.ndarray:
    return X / np.maximum(np.linalg.norm(X, axis=-1, keepdims=True), 1e-12)


def _benign(X: Any, y: Any, min_benign: int) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise DetectorError(f"X must be 2-D (messages, features), got shape {X.shape}")
    if y is not None:
        y = np.asarray(y)
        if y.shape != (len(X),):
            raise DetectorError(f"y has shape {y.shape}; expected ({len(X)},)")
        X = X[y == 0]
    if len(X) < min_benign:
        raise DetectorError(
            f"{len(X)} benign messages to fit on; the detector needs at least {min_benign} "
            "(run more tasks or lower min_benign)"
        )
    return X


class _Thresholded(ClassifierMixin, BaseEstimator):
    def predict(self, X: Any, **kw: Any) -> np.ndarray:
        """1 where the anomaly score is above the fitted threshold."""
        return (self.decision_function(X, **kw) > self.threshold_).astype(int)

    def score(self, X: Any, y: Any, sample_weight: Any = None, **kw: Any) -> float:
        """F1 of :meth:`predict` against ``y`` (1: compromised)."""
        return float(f1_score(y, self.predict(X, **kw), zero_division=0.0))


class PrototypeDetector(_Thresholded):
    """Cosine distance to the benign prototype (see the module docstring).

    With ``agents`` (each row's agent id) given to ``fit`` and ``decision_function``, every agent
    has its own prototype, fitted on its own benign calibration messages (rows of an agent never
    seen in calibration use the pooled prototype): the agent's *own* hidden states are the
    reference, so what separates agents (role tokens, notes) does not count as an anomaly.

    Args:
        quantile: Threshold = this quantile of the benign calibration distances.
        update: ``fixed`` or ``moving`` (per-round moving average of the prototype).
        momentum: Weight of the old prototype in a moving update.
        min_benign: Fewest benign rows ``fit`` accepts.
    """

    def __init__(
        self,
        quantile: float = 0.99,
        update: str = "fixed",
        momentum: float = 0.9,
        min_benign: int = 10,
    ) -> None:
        self.quantile = quantile
        self.update = update
        self.momentum = momentum
        self.min_benign = min_benign

    def fit(self, X: Any, y: Any = None, agents: Any = None) -> PrototypeDetector:
        """Fits the prototype(s) and threshold on the benign rows (``y == 0``, or all)."""
        if self.update not in ("fixed", "moving"):
            raise DetectorError(f"update={self.update!r}; use 'fixed' or 'moving'")
        if not 0 < self.quantile <= 1:
            raise DetectorError(f"quantile={self.quantile!r}; use a number in (0, 1]")
        Xb = _benign(X, y, self.min_benign)
        ab = None
        if agents is not None:
            ab = np.asarray(agents)
            if ab.shape != (len(np.asarray(X)),):
                raise DetectorError(f"agents has shape {ab.shape}; expected ({len(X)},)")
            if y is not None:
                ab = ab[np.asarray(y) == 0]
        Z = _normalize(Xb)
        self.prototype_ = _normalize(Z.mean(0))
        self.agent_prototypes_ = (
            {} if ab is None else {a: _normalize(Z[ab == a].mean(0)) for a in set(ab.tolist())}
        )
        self.threshold_ = float(np.quantile(self._distances(Z, ab, None), self.quantile))
        self.n_features_in_ = Xb.shape[1]
        return self

    def _reference(self, agents: np.ndarray | None, n: int, protos: dict | None) -> np.ndarray:
        if agents is None or not self.agent_prototypes_:
            return np.broadcast_to(self.prototype_, (n, len(self.prototype_)))
        protos = self.agent_prototypes_ if protos is None else protos
        return np.stack([protos.get(a, self.prototype_) for a in agents.tolist()])

    def _distances(
        self, Z: np.ndarray, agents: np.ndarray | None, protos: dict | None
    ) -> np.ndarray:
        return 1 - np.einsum("nd,nd->n", Z, self._reference(agents, len(Z), protos))

    def decision_function(self, X: Any, groups: Any = None, agents: Any = None) -> np.ndarray:
        """Cosine distances; with ``update="moving"`` and ``groups`` (rounds), round by round."""
        check_is_fitted(self, "prototype_")
        Z = _normalize(np.asarray(X, dtype=np.float64))
        agents = None if agents is None else np.asarray(agents)
        if self.update == "fixed" or groups is None:
            return self._distances(Z, agents, None)
        groups = np.asarray(groups)
        out = np.empty(len(Z))
        protos = dict(self.agent_prototypes_) or {None: self.prototype_}
        keys = agents if agents is not None and self.agent_prototypes_ else np.full(len(Z), None)
        for g in sorted(set(groups.tolist())):
            rows = np.flatnonzero(groups == g)
            ref = np.stack([protos.get(k, self.prototype_) for k in keys[rows].tolist()])
            out[rows] = 1 - np.einsum("nd,nd->n", Z[rows], ref)
            for k in set(keys[rows].tolist()):
                keep = rows[(keys[rows] == k) & (out[rows] <= self.threshold_)]
                if len(keep):
                    old = protos.get(k, self.prototype_)
                    new = self.momentum * old + (1 - self.momentum) * Z[keep].mean(0)
                    protos[k] = _normalize(new)
        return out


class MahalanobisDetector(_Thresholded):
    """Mahalanobis distance to the benign mean, Ledoit-Wolf covariance, quantile threshold."""

    def __init__(self, quantile: float = 0.99, min_benign: int = 10) -> None:
        self.quantile = quantile
        self.min_benign = min_benign

    def fit(self, X: Any, y: Any = None) -> MahalanobisDetector:
        """Fits mean, covariance and threshold on the benign rows."""
        from sklearn.covariance import LedoitWolf

        X = _benign(X, y, self.min_benign)
        self.covariance_ = LedoitWolf().fit(X)
        self.threshold_ = float(np.quantile(self.covariance_.mahalanobis(X), self.quantile))
        self.n_features_in_ = X.shape[1]
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Squared Mahalanobis distances."""
        check_is_fitted(self, "covariance_")
        return self.covariance_.mahalanobis(np.asarray(X, dtype=np.float64))


class TextMajorityDetector(_Thresholded):
    """Disagreement with the majority answer of the group (``online``: earlier messages only)."""

    def __init__(self, online: bool = False) -> None:
        self.online = online

    def fit(self, X: Any = None, y: Any = None) -> TextMajorityDetector:
        """Nothing to learn (the threshold is 0.5: flagged when it disagrees)."""
        self.threshold_ = 0.5
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """1 where the answer differs from its group's (strict) majority, else 0."""
        check_is_fitted(self, "threshold_")
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != 2:
            raise DetectorError(f"X must be (messages, 2) rows of (group, answer), got {X.shape}")
        out = np.zeros(len(X))
        seen: dict[Any, Counter] = {}
        for g in set(X[:, 0].tolist()):
            if not self.online:
                seen[g] = Counter(X[X[:, 0] == g, 1].tolist())
        for i, (g, a) in enumerate(X.tolist()):
            counts = seen.setdefault(g, Counter()) if self.online else seen[g]
            if counts:
                top, n = counts.most_common(1)[0]
                tie = sum(1 for v in counts.values() if v == n) > 1
                out[i] = float(not tie and a != top)
            if self.online:
                counts[a] += 1
        return out
