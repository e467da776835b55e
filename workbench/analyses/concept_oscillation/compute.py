"""Pure steps of the concept-oscillation study: arrays in, results out (no models, no disk).

* :func:`entropy` and :func:`relative_uncertainty`: the single-source answer entropies ``H_a``,
  ``H_b`` and ``dH = 2 (H_a - H_b) / (H_a + H_b)``;
* :func:`fit_logistic` (Newton's method, vectorized over bootstrap replicates) and
  :func:`follow_curve`: ``P(follow a | dH)``, its balance point (where it crosses 0.5) with a
  percentile bootstrap interval, and the binned follow rates;
* :func:`count_oscillations`: switches of the per-layer top-1 between ``Y_a`` and ``Y_b``, where a
  layer whose top-1 is neither does not reset the count;
* :func:`oscillation_summary`, :func:`logit_diff_map`: the groups and the heatmap.

The summary statistics of a finished result (where the decision settles, how often the controls
answer ``Y_b`` per tier) are in :mod:`.summary`.

The logistic fit is maximum likelihood with a weak ridge on the slope (``L2``): without it,
perfectly separated outcomes (a sharp step in ``dH``) send the slope to infinity; with it the
balance point stays where the two classes meet. It matches scikit-learn's
``LogisticRegression(C=1 / L2)`` (whose penalty also spares the intercept).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.analyses.concept_oscillation.results import (
    CaseRun,
    ConceptOscillationResult,
    FollowCurve,
    LogitDiffMap,
    OscillationSummary,
    ProbeCurve,
)
from workbench.errors import InputError
from workbench.stats import bootstrap

AMBIGUOUS_WIDTH = 0.5
"""Cases with ``|dH - balance point| <= AMBIGUOUS_WIDTH`` are "ambiguous", the rest "clear"."""
L2 = 1e-2
"""Ridge on the logistic slope (sum-of-log-loss scale; scikit-learn's ``C = 1 / L2``)."""
N_BINS = 5
"""Quantile bins of ``dH`` for the binned follow curve."""
CONFIDENCE = 0.95
"""Coverage of the bootstrap interval of the balance point."""


def entropy(logits: Any) -> np.ndarray:
    """Entropy in nats of ``softmax(logits)`` over the last axis, in float64."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    p = np.exp(logp)
    return -(p * np.where(p > 0, logp, 0.0)).sum(axis=-1)


def relative_uncertainty(h_a: Any, h_b: Any) -> np.ndarray:
    """``dH = 2 (H_a - H_b) / (H_a + H_b)`` per case (0 where both entropies are 0).

    Positive when source A alone is the more uncertain one; bounded by ``[-2, 2]``.
    """
    h_a = np.asarray(h_a, dtype=np.float64)
    h_b = np.asarray(h_b, dtype=np.float64)
    if h_a.shape != h_b.shape:
        raise InputError(f"H_a has shape {h_a.shape}, H_b {h_b.shape}; one value per case each")
    if (h_a < 0).any() or (h_b < 0).any():
        raise InputError("entropies must be non-negative")
    total = h_a + h_b
    return np.where(total > 0, 2 * (h_a - h_b) / np.where(total > 0, total, 1.0), 0.0)


def fit_logistic(
    x: Any, y: Any, weights: Any = None, *, l2: float = L2, max_iter: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Logistic regression of ``y`` on one feature, by Newton's method; vectorized over fits.

    Minimizes ``sum_i w_i logloss(y_i, b0 + b1 x_i) + l2 * b1**2 / 2`` for each row of
    ``weights`` (e.g. case counts), in float64.

    Args:
        x: ``(n,)`` feature.
        y: ``(n,)`` outcomes in {0, 1}.
        weights: ``(n,)`` or ``(n_fits, n)`` case weights (default: ones).
        l2: Ridge on the slope (the intercept is not penalized).
        max_iter: Newton steps at most.

    Returns:
        ``(intercept, slope)``, each ``(n_fits,)`` (``(1,)`` without 2-D weights).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise InputError(f"x {x.shape} and y {y.shape} must be equal 1-D arrays")
    w = np.ones((1, len(x))) if weights is None else np.atleast_2d(np.asarray(weights, float))
    if w.shape[1] != len(x):
        raise InputError(f"weights have {w.shape[1]} columns for {len(x)} cases")
    beta = np.zeros((len(w), 2))
    for _ in range(max_iter):
        eta = beta[:, :1] + beta[:, 1:] * x
        p = 1.0 / (1.0 + np.exp(-eta))
        r = w * (p - y)
        s = w * p * (1 - p)
        g = np.stack([r.sum(1), (r * x).sum(1) + l2 * beta[:, 1]], axis=1)
        h00, h01 = s.sum(1) + 1e-12, (s * x).sum(1)
        h11 = (s * x * x).sum(1) + l2
        det = h00 * h11 - h01 * h01
        step = np.stack([(h11 * g[:, 0] - h01 * g[:, 1]), (h00 * g[:, 1] - h01 * g[:, 0])], 1)
        step /= det[:, None]
        beta = beta - step
        if np.abs(step).max() < 1e-10:
            break
    return beta[:, 0], beta[:, 1]


def balance_point(intercept: Any, slope: Any) -> np.ndarray:
    """Where the fitted curve crosses 0.5: ``-intercept / slope`` (NaN for a flat curve)."""
    intercept = np.asarray(intercept, dtype=np.float64)
    slope = np.asarray(slope, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(slope != 0, -intercept / np.where(slope != 0, slope, 1.0), np.nan)


def binned_rates(x: Any, y: Any, n_bins: int = N_BINS) -> tuple[np.ndarray, ...]:
    """Follow rate in ``n_bins`` quantile bins of ``x`` (tied values never split across bins).

    Returns:
        ``(centers, rates, counts)``: mean ``x``, mean ``y`` and size of each non-empty bin, in
        increasing ``x``.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    edges = np.quantile(x, np.linspace(0, 1, n_bins + 1)[1:-1])
    index = np.searchsorted(edges, x, side="right")
    centers, rates, counts = [], [], []
    for b in range(n_bins):
        inside = index == b
        if inside.any():
            centers.append(x[inside].mean())
            rates.append(y[inside].mean())
            counts.append(int(inside.sum()))
    return np.array(centers), np.array(rates), np.array(counts, dtype=np.int64)


def follow_curve(
    dh: Any,
    follow_a: Any,
    used: Any,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    n_bins: int = N_BINS,
) -> FollowCurve:
    """``P(follow a | dH)``: logistic fit, balance point with a bootstrap interval, binned rates.

    Args:
        dh: ``(n,)`` relative uncertainty of each conflict case.
        follow_a: ``(n,)`` whether the model's answer to the conflict is ``Y_a``.
        used: ``(n,)`` whether it is ``Y_a`` or ``Y_b`` (cases answering neither are left out).
        n_bootstrap: Resamples of the used cases for the interval.
        seed: Resampling seed.
        n_bins: Quantile bins of the binned curve.

    Returns:
        The curve; its fit fields are ``None`` when the used cases do not hold both outcomes.
    """
    dh = np.asarray(dh, dtype=np.float64)
    follow_a = np.asarray(follow_a, dtype=bool)
    used = np.asarray(used, dtype=bool)
    x, y = dh[used], follow_a[used].astype(np.float64)
    centers, rates, counts = binned_rates(x, y, n_bins) if len(x) else (np.zeros(0),) * 3
    fit: dict[str, Any] = {"intercept": None, "slope": None, "balance": None, "ci": None}
    if len(x) >= 2 and 0 < y.sum() < len(y):
        b0, b1 = fit_logistic(x, y)
        fit["intercept"], fit["slope"] = float(b0[0]), float(b1[0])
        fit["balance"] = float(balance_point(b0, b1)[0])
        fit["ci"] = _balance_interval(x, y, n_bootstrap, seed)
    return FollowCurve(
        dh=dh,
        follow_a=follow_a,
        used=used,
        intercept=fit["intercept"],
        slope=fit["slope"],
        balance_point=fit["balance"],
        balance_ci=fit["ci"],
        n_bootstrap=n_bootstrap,
        bin_centers=centers,
        bin_rates=rates,
        bin_counts=counts,
    )


def _balance_interval(
    x: np.ndarray, y: np.ndarray, n_bootstrap: int, seed: int
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the balance point (resampled cases, refitted)."""

    def balance(idx: np.ndarray) -> float:
        if not 0 < y[idx].sum() < len(idx):
            raise ValueError("a resample holding one outcome has no balance point")
        b0, b1 = fit_logistic(x[idx], y[idx])
        return float(balance_point(b0, b1)[0])

    boot = bootstrap(balance, len(x), n_samples=n_bootstrap, seed=seed, size=1)
    if not len(boot.samples):
        return None
    lo, hi = boot.interval(CONFIDENCE)[:, 0]
    return float(lo), float(hi)


def count_oscillations(top1: Any, y_a: Any, y_b: Any) -> np.ndarray:
    """Switches of the per-layer top-1 between ``Y_a`` and ``Y_b``, per case.

    Layers whose top-1 is neither answer are skipped, so ``a, x, b`` counts one switch and
    ``a, x, a`` none: an irrelevant token in between does not reset the count.

    Args:
        top1: ``(n_layers, n)`` top-1 token id of each case at each layer (in layer order).
        y_a: ``(n,)`` token id of answer A of each case.
        y_b: ``(n,)`` token id of answer B.

    Returns:
        ``(n,)`` int64 counts.
    """
    top1 = np.asarray(top1, dtype=np.int64)
    y_a = np.asarray(y_a, dtype=np.int64)
    y_b = np.asarray(y_b, dtype=np.int64)
    if top1.ndim != 2 or y_a.shape != (top1.shape[1],) or y_b.shape != y_a.shape:
        raise InputError(
            f"top1 {top1.shape} must be (n_layers, n) with y_a {y_a.shape} and y_b {y_b.shape} (n,)"
        )
    state = np.where(top1 == y_a, 1, np.where(top1 == y_b, -1, 0))
    counts = np.zeros(top1.shape[1], dtype=np.int64)
    last = np.zeros(top1.shape[1], dtype=np.int64)
    for row in state:
        counts += (row != 0) & (last != 0) & (row != last)
        last = np.where(row != 0, row, last)
    return counts


def ratio_interval(
    ambiguous: Any, clear: Any, *, n_bootstrap: int = 1000, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap 95% interval of ``mean(ambiguous) / mean(clear)`` oscillations.

    The two groups are resampled apart (cases with replacement); replicates whose clear mean is
    0 are left out. ``None`` when a group is empty or every replicate is undefined.
    """
    ambiguous = np.asarray(ambiguous, dtype=np.float64)
    clear = np.asarray(clear, dtype=np.float64)
    if not len(ambiguous) or not len(clear):
        return None
    values = np.concatenate([ambiguous, clear])
    is_clear = np.arange(len(values)) >= len(ambiguous)

    def ratio(idx: np.ndarray) -> float:
        v, c = values[idx], is_clear[idx]
        return float(v[~c].mean() / v[c].mean())  # 0 / 0 or x / 0: not finite, left out

    with np.errstate(divide="ignore", invalid="ignore"):
        boot = bootstrap(ratio, len(values), n_samples=n_bootstrap, seed=seed, strata=is_clear)
    if not len(boot.samples):
        return None
    lo, hi = boot.interval(CONFIDENCE)[:, 0]
    return float(lo), float(hi)


def ambiguous_mask(dh: Any, balance: float | None, width: float = AMBIGUOUS_WIDTH) -> np.ndarray:
    """Cases within ``width`` of the balance point (all ``False`` when it is undefined)."""
    dh = np.asarray(dh, dtype=np.float64)
    if balance is None or not np.isfinite(balance):
        return np.zeros(dh.shape, dtype=bool)
    return np.abs(dh - balance) <= width


def oscillation_summary(
    conflict_counts: Any, ambiguous: Any, control_counts: Any
) -> OscillationSummary:
    """Mean oscillations of the ambiguous and the clear conflicts and of the controls."""
    conflict_counts = np.asarray(conflict_counts, dtype=np.int64)
    ambiguous = np.asarray(ambiguous, dtype=bool)
    if ambiguous.shape != conflict_counts.shape:
        raise InputError(f"{ambiguous.shape} ambiguity flags for {conflict_counts.shape} counts")
    return OscillationSummary(
        ambiguous=conflict_counts[ambiguous],
        clear=conflict_counts[~ambiguous],
        control=np.asarray(control_counts, dtype=np.int64),
    )


def logit_diff_map(diff: Any, dh: Any, layers: Any, n_bins: int = 12) -> LogitDiffMap:
    """Mean ``logit(Y_a) - logit(Y_b)`` per layer in equal-count bins of ``dH``.

    Args:
        diff: ``(n_layers, n)`` lens logit difference of each conflict case at each layer.
        dh: ``(n,)`` relative uncertainty.
        layers: ``(n_layers,)`` layer indices.
        n_bins: Bins of ``dH`` (at most one per case).
    """
    diff = np.asarray(diff, dtype=np.float64)
    dh = np.asarray(dh, dtype=np.float64)
    order = np.argsort(dh, kind="stable")
    groups = [g for g in np.array_split(order, min(n_bins, len(dh))) if len(g)]
    return LogitDiffMap(
        layers=np.asarray(layers, dtype=np.int64),
        dh_centers=np.array([dh[g].mean() for g in groups]),
        mean_diff=np.stack([diff[:, g].mean(axis=1) for g in groups], axis=1),
        counts=np.array([len(g) for g in groups], dtype=np.int64),
    )


PROBE_FOLDS = 5
"""Cross-validation folds of the per-layer probe (each outcome needs at least this many cases)."""
PROBE_SEEDS = 3
"""Repetitions of the cross-validation with new folds."""


def probe_curve(
    features: dict[int, Any], follow_a: Any, used: Any, *, seed: int = 0
) -> tuple[ProbeCurve | None, str | None]:
    """Per-layer linear probe for "will the model follow source A?" (cross-validated).

    The probe (:class:`workbench.probes.LinearProbe` through :func:`workbench.probes.probe_sweep`)
    reads one feature matrix per layer; the labels are the model's own final choice, for the cases
    that answer ``Y_a`` or ``Y_b``. The control is the same probe on shuffled labels. The study
    gives it the residual read along the two answers' unembedding difference (the lens's
    ``logit(Y_a) - logit(Y_b)``, see :func:`relation_features`): "follows A" is a relation
    between the residual and the case's two answers, which a read of the raw residual alone, the
    same direction for every case, does not give (that probe stayed at the majority baseline).

    Args:
        features: Layer to ``(n, d)`` features of every conflict case.
        follow_a: ``(n,)`` the answer is ``Y_a``.
        used: ``(n,)`` the answer is ``Y_a`` or ``Y_b``.
        seed: Seed of the folds and the shuffled control.

    Returns:
        ``(curve, None)``, or ``(None, why)`` when an outcome has fewer than
        :data:`PROBE_FOLDS` cases.
    """
    from workbench.probes import probe_sweep

    follow_a = np.asarray(follow_a, dtype=bool)
    used = np.asarray(used, dtype=bool)
    labels = follow_a[used].astype(np.int64)
    n_a, n_b = int(labels.sum()), int(len(labels) - labels.sum())
    if min(n_a, n_b) < PROBE_FOLDS:
        return None, (
            f"probe skipped: {n_a} case(s) follow A and {n_b} follow B; each outcome needs at "
            f"least {PROBE_FOLDS} (the folds)"
        )
    layers = sorted(features)
    acts = {f"resid_post.{layer}": np.asarray(features[layer])[used] for layer in layers}
    sweep = probe_sweep(
        acts,
        labels,
        cv=PROBE_FOLDS,
        seeds=PROBE_SEEDS,
        control="shuffled",
        random_state=seed,
        progress=False,
    )
    table = sweep.summary()
    return (
        ProbeCurve(
            layers=np.asarray(layers),
            accuracy=table["accuracy"].to_numpy(dtype=np.float64),
            accuracy_lo=table["accuracy_lo"].to_numpy(dtype=np.float64),
            accuracy_hi=table["accuracy_hi"].to_numpy(dtype=np.float64),
            control=table["control"].to_numpy(dtype=np.float64),
            chance=float(sweep.chance),
            n_cases=len(labels),
        ),
        None,
    )


def relation_features(lens_diff: Any, layers: Any) -> dict[int, np.ndarray]:
    """The probe's features: each layer's lens ``logit(Y_a) - logit(Y_b)`` as an ``(n, 1)`` column.

    This is the residual read along ``u(Y_a) - u(Y_b)`` (the two answers' unembedding rows,
    after the lens's translator and the final norm): a direction that depends on the case.
    """
    diff = np.asarray(lens_diff, dtype=np.float64)
    return {int(layer): diff[i][:, None] for i, layer in enumerate(np.asarray(layers))}


def analyze(
    run: CaseRun,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    cases: str = "",
    training: dict[str, Any] | None = None,
) -> ConceptOscillationResult:
    """The study's numbers from a model's readouts: follow curve, groups, oscillations, heatmap.

    Args:
        run: The readouts of the conflicts and the controls, and the probe.
        n_bootstrap: Bootstrap resamples of the balance point.
        seed: Bootstrap seed.
        cases: Where the cases came from (recorded).
        training: The toy's training summary (recorded).
    """
    conflicts, controls = run.conflicts, run.controls
    dh = relative_uncertainty(conflicts.h_a, conflicts.h_b)
    used = conflicts.follow_a | conflicts.follow_b
    curve = follow_curve(dh, conflicts.follow_a, used, n_bootstrap=n_bootstrap, seed=seed)
    ambiguous = ambiguous_mask(dh, curve.balance_point)
    counts = count_oscillations(conflicts.lens_top1, conflicts.y_a, conflicts.y_b)
    control_counts = count_oscillations(controls.lens_top1, controls.y_a, controls.y_b)
    ratio_ci = ratio_interval(counts[ambiguous], counts[~ambiguous], n_bootstrap=n_bootstrap,
                              seed=seed)  # fmt: skip
    notes = list(run.notes)
    if curve.slope is None:
        n_a, n_b = int(conflicts.follow_a.sum()), int(conflicts.follow_b.sum())
        notes.append(
            f"no follow curve: {n_a} conflict(s) answer Y_a and {n_b} answer Y_b; the fit needs "
            "both outcomes (ambiguous and clear are then undefined)"
        )
    other = int((~used).sum())
    if other:
        notes.append(
            f"{other} of {conflicts.n} conflicts answer neither Y_a nor Y_b (left out of the fit)"
        )
    if not controls.n:
        notes.append("no control cases")
    probe = run.probe
    if probe is not None and not (probe.accuracy_lo > probe.chance).any():
        notes.append(
            f"the probe does not beat the majority baseline ({probe.chance:.3f}) at any layer "
            f"(best {probe.best_accuracy:.3f} at layer {probe.best_layer}; lower bounds "
            f"{probe.accuracy_lo.max():.3f} at most)"
        )
    return ConceptOscillationResult(
        run=run,
        follow=curve,
        ambiguous=ambiguous,
        conflict_oscillations=counts,
        oscillations=oscillation_summary(counts, ambiguous, control_counts),
        heatmap=logit_diff_map(conflicts.lens_diff, dh, conflicts.layers),
        ratio_ci=ratio_ci,
        cases=cases,
        training=training,
        notes=tuple(notes),
    )
