"""Detectors of compromised agents' messages, with the scikit-learn estimator contract.

Hyperparameters only in ``__init__``; ``fit`` returns ``self``; learned state ends in ``_``;
``decision_function`` is an anomaly score (higher: more likely compromised); ``predict`` gives
0/1; ``score(X, y)`` is the F1 of ``predict``.

* :class:`PrototypeDetector` (AcMAS): the prototype is the normalized centroid of the benign
  messages' normalized activations; a message's score is its cosine distance to the prototype
  (or, ``metric="mahalanobis"``, its distance to the benign centroid under the benign
  covariance), flagged above the ``quantile`` of held-out benign calibration distances. With
  ``update="moving"`` (the paper's synchronous mode) the prototype follows each round, in time
  order: after a round is scored it becomes the running mean of the calibration messages and
  the unflagged ones so far (with a ``momentum``, ``momentum * p + (1 - momentum) * mean of
  the round's unflagged messages``; renormalized for cosine); with ``update="fixed"``
  (asynchronous mode, no round boundary) it stays as fitted.
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
from sklearn.base import BaseEstimator
from sklearn.metrics import f1_score
from sklearn.utils.validation import check_is_fitted, validate_data

from workbench.errors import DetectorError


def _normalize(X: np.ndarray) -> np.ndarray:
    return X / np.maximum(np.linalg.norm(X, axis=-1, keepdims=True), 1e-12)


def _matrix(est: BaseEstimator, X: Any) -> np.ndarray:
    """``X`` validated as a 2-D float matrix for fitting (sets ``n_features_in_``)."""
    if np.ndim(X) != 2 and not hasattr(X, "tocsr"):
        raise DetectorError(f"X must be 2-D (messages, features), got shape {np.shape(X)}")
    return validate_data(est, X, dtype=np.float64, reset=True)


def _benign(est: BaseEstimator, X: Any, y: Any, min_benign: int) -> np.ndarray:
    """The benign rows of ``X`` (validated; sets ``n_features_in_``)."""
    X = _matrix(est, X)
    if y is not None:
        y = np.asarray(y)
        if y.shape != (len(X),):
            raise DetectorError(f"y has shape {y.shape}; expected ({len(X)},)")
        X = X[y == 0]
    if len(X) < min_benign:
        raise DetectorError(
            f"{len(X)} benign messages to fit on (n_samples={len(X)}); the detector needs at "
            f"least {min_benign} (run more tasks or lower min_benign)"
        )
    return X


def _rows(values: Any, name: str, n: int, keep: Any = slice(None)) -> np.ndarray | None:
    """``values`` as an array of ``n`` rows (then ``keep``-selected), or ``None``."""
    if values is None:
        return None
    values = np.asarray(values)
    if values.shape != (n,):
        raise DetectorError(f"{name} has shape {values.shape}; expected ({n},)")
    return values[keep]


def context_offsets(
    X: np.ndarray, agents: np.ndarray | None, contexts: np.ndarray, n_iter: int = 50
) -> dict[Any, np.ndarray]:
    """Additive context effects: ``X ~ agent mean + offset[context]`` by alternating means.

    The offsets are centred (their row-weighted mean is zero), so without contexts the agents'
    means are unchanged on a balanced design. With ``agents=None`` the agent effect is one mean.

    Returns:
        Context kind to its ``(d,)`` offset.
    """
    agents = np.zeros(len(X), dtype=int) if agents is None else np.asarray(agents)
    contexts = np.asarray(contexts)
    a_idx, a_inv = np.unique(agents, return_inverse=True)
    c_idx, c_inv = np.unique(contexts, return_inverse=True)
    a_n = np.bincount(a_inv, minlength=len(a_idx))[:, None]
    c_n = np.bincount(c_inv, minlength=len(c_idx))[:, None]
    offset = np.zeros((len(c_idx), X.shape[1]))
    for _ in range(n_iter):
        means = np.zeros((len(a_idx), X.shape[1]))
        np.add.at(means, a_inv, X - offset[c_inv])
        means /= a_n
        new = np.zeros_like(offset)
        np.add.at(new, c_inv, X - means[a_inv])
        new /= c_n
        new -= (new * c_n).sum(0) / len(X)
        done = np.allclose(new, offset, rtol=0, atol=1e-12 * (1 + np.abs(X).max()))
        offset = new
        if done:
            break
    return {c: offset[i] for i, c in enumerate(c_idx.tolist())}


def _shift(
    X: np.ndarray, contexts: np.ndarray | None, offsets: dict[Any, np.ndarray]
) -> np.ndarray:
    """``X`` less each row's context offset (none for an unknown context or without offsets)."""
    if contexts is None or not offsets:
        return X
    zero = np.zeros(X.shape[1])
    return X - np.stack([offsets.get(c, zero) for c in contexts.tolist()])


class _Thresholded(BaseEstimator):
    """An anomaly detector: ``decision_function`` scores, ``predict`` 0/1, ``score`` F1.

    Not a scikit-learn classifier: ``y`` (when given to ``fit``) only selects the benign rows
    (``y == 0``) the detector is fitted on; nothing is learned from the compromised ones.
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags

    def _validate(self, X: Any) -> np.ndarray:
        return validate_data(self, X, dtype=np.float64, reset=False)

    def predict(self, X: Any, **kw: Any) -> np.ndarray:
        """1 where the anomaly score is above the fitted threshold."""
        return (self.decision_function(X, **kw) > self.threshold_).astype(int)

    def score(self, X: Any, y: Any, sample_weight: Any = None, **kw: Any) -> float:
        """F1 of :meth:`predict` against ``y`` (nonzero: compromised)."""
        truth = (np.asarray(y) != 0).astype(int)
        return float(f1_score(truth, self.predict(X, **kw), zero_division=0.0))


class PrototypeDetector(_Thresholded):
    """Distance to the benign prototype (see the module docstring).

    With ``agents`` (each row's agent id) given to ``fit`` and ``decision_function``, every agent
    has its own prototype, fitted on its own benign calibration messages (rows of an agent never
    seen in calibration use the pooled prototype): the agent's *own* hidden states are the
    reference, so what separates agents (role tokens, notes) does not count as an anomaly.

    With ``contexts`` (each row's context kind, e.g. how many peers' messages the turn saw) the
    reference of agent ``a`` in context ``c`` is ``a``'s prototype plus ``c``'s offset: an additive
    model of the calibration activations (agent effect plus context effect, fitted by alternating
    means, pooled over agents so that a context kind seen a few times per agent is still
    estimated from every agent's rows). Activations pooled over a turn move with the turn's shape
    (a turn without peers' answers is shorter, so its role prompt weighs more in the mean); one
    Gaussian per agent puts such turns in its tail, and when they are rare (an asynchronous
    task's first message) they outscore compromised messages. Unknown contexts get no offset.

    ``metric="cosine"`` is the paper's distance: one minus the cosine to the normalized centroid
    of the normalized activations. ``metric="mahalanobis"`` keeps the prototype (the agent's
    benign centroid) but measures the squared distance to it under the pooled within-agent
    Ledoit-Wolf covariance of the calibration run: directions in which benign messages vary a
    lot (the question, the peers' answers) count little, and a shift along a direction in which
    they hardly vary counts a lot. Cosine distance weighs every direction alike, and on a model
    whose activations share one large direction (cosines to the prototype about 0.99) the
    injected instruction's shift is drowned in the variation between questions.

    The threshold is the ``quantile`` of *held-out* benign distances (cross-fitting): the
    calibration messages are split into ``n_folds`` folds, and each fold's distances are taken
    to prototypes (and covariance) fitted on the other folds. Distances to a prototype fitted on
    the same rows are smaller than those of new benign messages, all the more so for the
    covariance-aware distance in 32 dimensions fitted on a few hundred messages, and set the
    cut too low (false positives). Folds of whole tasks overshoot the other way: the toy has
    only 11 questions, and a held-out task often asks one the other tasks never did.

    Args:
        quantile: Threshold = this quantile of the held-out benign calibration distances.
        update: ``fixed`` or ``moving`` (per-round moving average of the prototype).
        momentum: Weight of the old prototype in a moving update, or ``None`` (default): a
            running mean, each new message weighing as much as one calibration message. A fixed
            0.9 gives one message 10% of the prototype (each sync round holds one message per
            agent), so the prototype jitters, benign distances grow past the cut calibrated on
            the fitted prototypes (sync false-positive rate 0.08 at the default, F1 0.89,
            AUROC 1.0), and a missed compromised message drags the prototype its way.
        min_benign: Fewest benign rows ``fit`` accepts.
        metric: ``cosine`` (the paper's) or ``mahalanobis`` (see above).
        n_folds: Folds of calibration messages for the cross-fitted threshold (below 2, or
            fewer than two messages per fold: in-sample distances).
        random_state: Seeds the assignment of messages to folds.
    """

    def __init__(
        self,
        quantile: float = 0.99,
        update: str = "fixed",
        momentum: float | None = None,
        min_benign: int = 10,
        metric: str = "cosine",
        n_folds: int = 10,
        random_state: int = 0,
    ) -> None:
        self.quantile = quantile
        self.update = update
        self.momentum = momentum
        self.min_benign = min_benign
        self.metric = metric
        self.n_folds = n_folds
        self.random_state = random_state

    def fit(
        self, X: Any, y: Any = None, agents: Any = None, contexts: Any = None
    ) -> PrototypeDetector:
        """Fits the prototype(s) and threshold on the benign rows (``y == 0``, or all).

        Args:
            X: ``(n, d)`` calibration activations.
            y: Optional labels; only rows with ``y == 0`` are used.
            agents: Optional ``(n,)`` agent of each row (per-agent prototypes).
            contexts: Optional ``(n,)`` context kind of each row (additive context offsets).
        """
        if self.update not in ("fixed", "moving"):
            raise DetectorError(f"update={self.update!r}; use 'fixed' or 'moving'")
        if self.metric not in ("cosine", "mahalanobis"):
            raise DetectorError(f"metric={self.metric!r}; use 'cosine' or 'mahalanobis'")
        if not 0 < self.quantile <= 1:
            raise DetectorError(f"quantile={self.quantile!r}; use a number in (0, 1]")
        Xb = _benign(self, X, y, self.min_benign)
        keep = slice(None) if y is None else np.asarray(y) == 0
        ab = _rows(agents, "agents", X.shape[0], keep)
        cb = _rows(contexts, "contexts", X.shape[0], keep)

        def part(v: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
            return None if v is None else v[rows]

        state = self._fit_state(Xb, ab, cb)
        distances = self._distances(self._transform(Xb, state, cb), ab, None, state)
        if self.n_folds >= 2 and len(Xb) >= 2 * self.n_folds:
            folds = np.random.default_rng(self.random_state).permutation(len(Xb)) % self.n_folds
            distances = np.empty(len(Xb))
            for f in range(self.n_folds):
                out = folds == f
                sub = self._fit_state(Xb[~out], part(ab, ~out), part(cb, ~out))
                distances[out] = self._distances(
                    self._transform(Xb[out], sub, part(cb, out)), part(ab, out), None, sub
                )
        self.prototype_, self.agent_prototypes_ = state["pooled"], state["agents"]
        self.context_offsets_ = state["offsets"]
        self.counts_ = {a: int((ab == a).sum()) for a in self.agent_prototypes_} | {None: len(Xb)}
        self.whitener_, self.center_ = state["whitener"], state["center"]
        self.threshold_ = float(np.quantile(distances, self.quantile))
        return self

    def _fit_state(
        self, X: np.ndarray, agents: np.ndarray | None, contexts: np.ndarray | None = None
    ) -> dict[str, Any]:
        """Prototypes (metric space), context offsets, the whitening map for ``mahalanobis``."""
        offsets = {} if contexts is None else context_offsets(X, agents, contexts)
        X = _shift(X, contexts, offsets)
        center, whitener = np.zeros(X.shape[1]), None
        if self.metric == "mahalanobis":
            from sklearn.covariance import LedoitWolf

            resid = X - X.mean(0)
            if agents is not None:
                for a in np.unique(agents):
                    resid[agents == a] = X[agents == a] - X[agents == a].mean(0)
            cov = LedoitWolf().fit(resid).covariance_
            vals, vecs = np.linalg.eigh(cov)
            whitener = vecs / np.sqrt(np.maximum(vals, 1e-12 * vals.max()))
            center = X.mean(0)
        state = {"center": center, "whitener": whitener, "offsets": {}}
        Z = self._transform(X, state)
        state["offsets"] = offsets
        state["pooled"] = self._centroid(Z)
        state["agents"] = (
            {}
            if agents is None
            else {a: self._centroid(Z[agents == a]) for a in np.unique(agents).tolist()}
        )
        return state

    def _transform(
        self, X: np.ndarray, state: dict[str, Any], contexts: np.ndarray | None = None
    ) -> np.ndarray:
        X = _shift(X, contexts, state["offsets"])
        if state["whitener"] is None:
            return _normalize(X)
        return (X - state["center"]) @ state["whitener"]

    def _centroid(self, Z: np.ndarray) -> np.ndarray:
        return _normalize(Z.mean(0)) if self.metric == "cosine" else Z.mean(0)

    def _dist(self, Z: np.ndarray, ref: np.ndarray) -> np.ndarray:
        if self.metric == "cosine":
            return 1 - np.einsum("nd,nd->n", Z, ref)
        return np.einsum("nd,nd->n", Z - ref, Z - ref)

    def _reference(
        self, agents: np.ndarray | None, n: int, protos: dict | None, state: dict[str, Any]
    ) -> np.ndarray:
        pooled = state["pooled"]
        if agents is None or not state["agents"]:
            return np.broadcast_to(pooled, (n, len(pooled)))
        protos = state["agents"] if protos is None else protos
        return np.stack([protos.get(a, pooled) for a in agents.tolist()])

    def _distances(
        self, Z: np.ndarray, agents: np.ndarray | None, protos: dict | None, state: dict[str, Any]
    ) -> np.ndarray:
        return self._dist(Z, self._reference(agents, len(Z), protos, state))

    def _state(self) -> dict[str, Any]:
        return {
            "pooled": self.prototype_,
            "agents": self.agent_prototypes_,
            "whitener": self.whitener_,
            "center": self.center_,
            "offsets": getattr(self, "context_offsets_", {}),
        }

    def decision_function(
        self, X: Any, groups: Any = None, agents: Any = None, contexts: Any = None
    ) -> np.ndarray:
        """Distances to the prototypes; moving ones with ``update="moving"`` and ``groups``.

        ``groups`` are the rounds, in time order (first seen, first scored): after a round is
        scored, each agent's prototype moves toward the mean of its unflagged messages of it.
        ``contexts`` are the rows' context kinds (see the class docstring).
        """
        check_is_fitted(self, "prototype_")
        X = self._validate(X)
        state = self._state()
        Z = self._transform(X, state, _rows(contexts, "contexts", len(X)))
        agents = None if agents is None else np.asarray(agents)
        if self.update == "fixed" or groups is None:
            return self._distances(Z, agents, None, state)
        (out,) = _follow([self], [Z], agents, np.asarray(groups), lambda d: d[0] <= self.threshold_)
        return out

    def _moving_start(self, agents: np.ndarray | None, n: int) -> tuple[dict, dict, np.ndarray]:
        """The moving state: prototypes and their weights by key, and each row's key."""
        protos = dict(self.agent_prototypes_) or {None: self.prototype_}
        keys = agents if agents is not None and self.agent_prototypes_ else np.full(n, None)
        return protos, dict(self.counts_), keys

    def _moving_update(self, protos: dict, counts: dict, key: Any, Z: np.ndarray) -> None:
        """Moves ``key``'s prototype toward the kept rows ``Z`` (metric space)."""
        old = protos.get(key, self.prototype_)
        if self.momentum is None:  # running mean over calibration and kept rows
            n = counts.get(key, counts[None])
            new = (n * old + Z.sum(0)) / (n + len(Z))
            counts[key] = n + len(Z)
        else:
            new = self.momentum * old + (1 - self.momentum) * Z.mean(0)
        protos[key] = self._centroid(new[None])


def _follow(
    detectors: list[PrototypeDetector],
    Zs: list[np.ndarray],
    agents: np.ndarray | None,
    groups: np.ndarray,
    keep: Any,
) -> list[np.ndarray]:
    """Distances to moving prototypes, round by round in time order, one array per view.

    Each detector scores its view ``Zs[i]`` (rows already in its metric space). After a round
    (a value of ``groups``, taken in first-seen order: the rows' time order) is scored, every
    detector moves each agent's prototype toward that agent's rows that ``keep`` (given the
    round's distances, one array per view) marks as unflagged.
    """
    starts = [det._moving_start(agents, len(Z)) for det, Z in zip(detectors, Zs, strict=True)]
    outs = [np.empty(len(Z)) for Z in Zs]
    for g in dict.fromkeys(groups.tolist()):
        rows = np.flatnonzero(groups == g)
        for det, Z, (protos, _, keys), out in zip(detectors, Zs, starts, outs, strict=True):
            ref = np.stack([protos.get(k, det.prototype_) for k in keys[rows].tolist()])
            out[rows] = det._dist(Z[rows], ref)
        ok = np.asarray(keep([out[rows] for out in outs]), dtype=bool)
        for det, Z, (protos, counts, keys) in zip(detectors, Zs, starts, strict=True):
            for k in set(keys[rows].tolist()):
                kept = rows[(keys[rows] == k) & ok]
                if len(kept):
                    det._moving_update(protos, counts, k, Z[kept])
    return outs


class AlarmedPrototypeDetector(_Thresholded):
    """The prototype detector on a main view, with an extreme-distance alarm on a second view.

    ``X`` holds two views of each message side by side: its first ``n_main`` columns (default:
    half) are the main view (e.g. the turn's mean activation), the rest the alarm view (e.g. its
    last token). Each view has its own :class:`PrototypeDetector` (same agents, contexts,
    metric and update); a message is flagged when its main-view distance is above the main cut
    (the ``quantile`` of held-out benign calibration distances) *or* its alarm-view distance is
    above the alarm cut (``alarm_quantile``, by default 1.0: farther than every held-out benign
    calibration message). The score is the larger of the two distances, each divided by its
    view's cut, so ``threshold_`` is 1.

    Why: a turn's mean dilutes a change that sits in a few tokens. On the toy the main view misses
    every first turn of some compromised agents (no peers' answers shown, so little to read
    but the role prompt), while at the last token the same turns lie 30 to 170 times beyond the
    benign cut. The last token alone is a poor detector: its benign distances are heavy-tailed
    (they move with the answer), so a 99% cut there flags nothing on some trainings. As an alarm
    past the benign maximum it adds only what no benign calibration message did.

    With ``update="moving"`` both views follow the rounds together: a row updates its agent's
    prototypes in both views only when neither view flags it.

    Args:
        n_main: Columns of the main view (``None``: half of ``X``'s columns).
        quantile: The main view's cut (quantile of held-out benign distances).
        alarm_quantile: The alarm view's cut.
        update, momentum, min_benign, metric, n_folds, random_state: As for
            :class:`PrototypeDetector` (both views).
    """

    def __init__(
        self,
        n_main: int | None = None,
        quantile: float = 0.99,
        alarm_quantile: float = 1.0,
        update: str = "fixed",
        momentum: float | None = None,
        min_benign: int = 10,
        metric: str = "mahalanobis",
        n_folds: int = 10,
        random_state: int = 0,
    ) -> None:
        self.n_main = n_main
        self.quantile = quantile
        self.alarm_quantile = alarm_quantile
        self.update = update
        self.momentum = momentum
        self.min_benign = min_benign
        self.metric = metric
        self.n_folds = n_folds
        self.random_state = random_state

    def _view(self, quantile: float) -> PrototypeDetector:
        """A view's detector: this one's shared parameters, with the view's own quantile."""
        shared = {k: getattr(self, k) for k in PrototypeDetector().get_params()}
        return PrototypeDetector(**(shared | {"quantile": quantile}))

    def fit(
        self, X: Any, y: Any = None, agents: Any = None, contexts: Any = None
    ) -> AlarmedPrototypeDetector:
        """Fits both views' prototypes and cuts on the benign rows (``y == 0``, or all).

        Args:
            X: ``(n, d)`` calibration activations, main view then alarm view.
            y: Optional labels; only rows with ``y == 0`` are used.
            agents: Optional ``(n,)`` agent of each row (per-agent prototypes).
            contexts: Optional ``(n,)`` context kind of each row (additive context offsets).
        """
        X = _matrix(self, X)
        split = X.shape[1] // 2 if self.n_main is None else self.n_main
        if not 0 < split < X.shape[1]:
            raise DetectorError(
                f"n_main={self.n_main!r} leaves no column for one of the two views "
                f"(X has n_features={X.shape[1]}; each view needs at least one)"
            )
        self.split_ = int(split)
        self.main_ = self._view(self.quantile).fit(X[:, :split], y, agents, contexts)
        self.alarm_ = self._view(self.alarm_quantile).fit(X[:, split:], y, agents, contexts)
        self.cuts_ = (self.main_.threshold_, self.alarm_.threshold_)
        self.threshold_ = 1.0
        return self

    def view_distances(
        self, X: Any, groups: Any = None, agents: Any = None, contexts: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(main, alarm)``: each view's distances to its prototypes (moving ones together)."""
        check_is_fitted(self, "main_")
        X = self._validate(X)
        views = (self.main_, self.alarm_)
        parts = (X[:, : self.split_], X[:, self.split_ :])
        if self.update == "fixed" or groups is None:
            return tuple(
                v.decision_function(p, agents=agents, contexts=contexts)
                for v, p in zip(views, parts, strict=True)
            )
        ctx = _rows(contexts, "contexts", len(X))
        Zs = [v._transform(p, v._state(), ctx) for v, p in zip(views, parts, strict=True)]
        agents = None if agents is None else np.asarray(agents)
        main, alarm = _follow(list(views), Zs, agents, np.asarray(groups), self._unflagged)
        return main, alarm

    def _ratio(self, main: np.ndarray, alarm: np.ndarray) -> np.ndarray:
        tiny = np.finfo(float).tiny
        return np.maximum(main / max(self.cuts_[0], tiny), alarm / max(self.cuts_[1], tiny))

    def _unflagged(self, distances: list[np.ndarray]) -> np.ndarray:
        return (distances[0] <= self.cuts_[0]) & (distances[1] <= self.cuts_[1])

    def decision_function(
        self, X: Any, groups: Any = None, agents: Any = None, contexts: Any = None
    ) -> np.ndarray:
        """The larger of the two views' distances, each over its cut (above 1: flagged)."""
        return self._ratio(*self.view_distances(X, groups, agents, contexts))


class MahalanobisDetector(_Thresholded):
    """Mahalanobis distance to the benign mean, Ledoit-Wolf covariance, quantile threshold."""

    def __init__(self, quantile: float = 0.99, min_benign: int = 10) -> None:
        self.quantile = quantile
        self.min_benign = min_benign

    def fit(self, X: Any, y: Any = None) -> MahalanobisDetector:
        """Fits mean, covariance and threshold on the benign rows."""
        from sklearn.covariance import LedoitWolf

        X = _benign(self, X, y, self.min_benign)
        self.covariance_ = LedoitWolf().fit(X)
        self.threshold_ = float(np.quantile(self.covariance_.mahalanobis(X), self.quantile))
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Squared Mahalanobis distances."""
        check_is_fitted(self, "covariance_")
        return self.covariance_.mahalanobis(self._validate(X))


class TextMajorityDetector(_Thresholded):
    """Disagreement with the majority answer of the group (``online``: earlier messages only)."""

    def __init__(self, online: bool = False) -> None:
        self.online = online

    def fit(self, X: Any = None, y: Any = None) -> TextMajorityDetector:
        """Nothing to learn (the threshold is 0.5: flagged when it disagrees); ``X`` is checked."""
        if X is not None:
            X = validate_data(self, X, reset=True)
            if X.shape[1] != 2:
                raise DetectorError(
                    f"X must be (messages, 2) rows of (group, answer), got {X.shape}"
                )
        self.threshold_ = 0.5
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """1 where the answer differs from its group's (strict) majority, else 0."""
        check_is_fitted(self, "threshold_")
        X = validate_data(self, X, reset=False) if hasattr(self, "n_features_in_") else X
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
