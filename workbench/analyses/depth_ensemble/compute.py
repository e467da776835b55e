"""Pure steps of the depth-ensemble study: arrays in, results out (no models, no disk, no plotly).

* :func:`layer_geometry`: how the residual stream moves through depth, from its states
  ``h_0`` (the first block's input) and ``h_{l+1}`` (block ``l``'s output), token by token:
  the step angle ``theta_l = angle(h_l, h_{l+1})``, the increment angle between successive
  updates ``dh_l = h_{l+1} - h_l`` and ``dh_{l+1}``, the update norms, and the angle of each
  state to the final one. Small, uniform step angles with increments near 90 degrees are the
  paper's signature of an ensemble of similar layers (independent small updates); increments
  near 0 degrees mean smooth, ODE-like dynamics. Each statistic is the mean over tokens.
* :func:`exit_layers` / :func:`early_exit_fraction`: the layer from which a token's lens top-1
  stays equal to the final top-1, and the share of tokens settled before the middle layer.
* :func:`fit_toy`: ``L = L0 + c / l^a`` over student depths, with the bootstrap over held-out
  examples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.analyses.depth_ensemble.fitting import fit_log_power_law, loglog_slope
from workbench.analyses.depth_ensemble.results import LayerGeometry
from workbench.analyses.depth_ensemble.toy_results import ToyFit
from workbench.errors import InputError
from workbench.stats import bootstrap

EPS = 1e-12


def angles_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angle in degrees between the rows of ``a`` and ``b`` (``NaN`` where either is zero)."""
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = (a * b).sum(-1) / (na * nb)
    cos = np.where((na > EPS) & (nb > EPS), np.clip(cos, -1.0, 1.0), np.nan)
    return np.degrees(np.arccos(cos))


def _mean(x: np.ndarray) -> float:
    finite = x[np.isfinite(x)]
    return float(finite.mean()) if finite.size else float("nan")


def layer_geometry(states: np.ndarray) -> LayerGeometry:
    """The geometry of the residual stream through depth.

    Args:
        states: ``(n_layers + 1, n_tokens, d)``: ``states[0]`` is the first block's input,
            ``states[l + 1]`` block ``l``'s output.

    Returns:
        Per-layer means over tokens (angles in degrees).

    Raises:
        InputError: No layer or no token.
    """
    h = np.asarray(states, dtype=np.float64)
    if h.ndim != 3 or h.shape[0] < 2 or h.shape[1] < 1:
        raise InputError(
            f"states must be (n_layers + 1 >= 2, n_tokens >= 1, d), got shape {h.shape}"
        )
    dh = np.diff(h, axis=0)
    norms = np.linalg.norm(h, axis=-1)
    updates = np.linalg.norm(dh, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(norms[:-1] > EPS, updates / norms[:-1], np.nan)
    return LayerGeometry(
        step_angle=np.array([_mean(angles_deg(h[i], h[i + 1])) for i in range(len(dh))]),
        increment_angle=np.array([_mean(angles_deg(dh[i], dh[i + 1])) for i in range(len(dh) - 1)]),
        update_norm=updates.mean(axis=1),
        relative_update=np.array([_mean(r) for r in relative]),
        state_norm=norms.mean(axis=1),
        angle_to_final=np.array([_mean(angles_deg(x, h[-1])) for x in h]),
        n_tokens=int(h.shape[1]),
    )


def exit_layers(top1: np.ndarray, final: np.ndarray) -> np.ndarray:
    """For each token, the first layer from which the lens top-1 equals ``final`` at every layer.

    Args:
        top1: ``(n_layers, n_tokens)`` lens top-1 token ids.
        final: ``(n_tokens,)`` the model's own top-1.

    Returns:
        ``(n_tokens,)`` ints in ``0..n_layers``; ``n_layers`` where even the last layer disagrees.
    """
    top1 = np.asarray(top1)
    agree = top1 == np.asarray(final)[None, :]
    # reversed cumulative AND: settled[l] = agree[l:] all true
    settled = np.flip(np.cumprod(np.flip(agree, axis=0), axis=0), axis=0).astype(bool)
    n_layers = top1.shape[0]
    first = np.where(settled.any(axis=0), settled.argmax(axis=0), n_layers)
    return first.astype(np.int64)


def early_exit_fraction(exits: np.ndarray, n_layers: int) -> float:
    """Share of tokens whose prediction is settled before the middle layer (exit < n_layers/2)."""
    exits = np.asarray(exits)
    if not exits.size:
        return float("nan")
    return float(np.mean(exits < n_layers / 2))


def fit_toy(
    teacher: str,
    depths: Sequence[int],
    per_example: np.ndarray,
    *,
    n_bootstrap: int = 200,
    seed: int = 0,
) -> ToyFit:
    """Fits ``L = L0 + c / l^a`` to the students' held-out losses.

    Args:
        teacher: The teacher's kind (recorded).
        depths: Student depths, increasing, at least 3.
        per_example: ``(n_depths, n_examples)`` held-out KL of each student on the same examples;
            the loss at a depth is its row mean. The bootstrap resamples examples (the same ones
            for every depth) and refits.
        n_bootstrap: Resamples (0: none).
        seed: Seed of the resampling.
    """
    depth = np.asarray(depths, dtype=np.float64)
    per_example = np.asarray(per_example, dtype=np.float64)
    if per_example.ndim != 2 or per_example.shape[0] != len(depth) or len(depth) < 3:
        raise InputError(
            f"need (n_depths >= 3, n_examples) losses for {len(depth)} depths, "
            f"got {per_example.shape}"
        )
    losses = per_example.mean(axis=1)
    x = depth[:, None]
    fit = fit_log_power_law(x, losses)

    def refit(idx: np.ndarray) -> np.ndarray:
        return fit_log_power_law(x, per_example[:, idx].mean(axis=1), start=fit.theta).theta

    boot = bootstrap(refit, per_example.shape[1], n_samples=n_bootstrap, seed=seed, size=3)
    log_c, a, l0 = fit.theta
    low, high = boot.interval()
    return ToyFit(
        teacher=teacher,
        depths=depth.astype(np.int64),
        losses=losses,
        L0=float(l0),
        c=float(np.exp(log_c)),
        a=float(a),
        a_se=float(fit.se[1]),
        a_bootstrap_se=float(boot.se()[1]),
        a_low=float(low[1]),
        a_high=float(high[1]),
        n_bootstrap=len(boot.samples),
        loglog_slope=loglog_slope(depth, losses),
    )
