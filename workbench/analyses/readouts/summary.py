"""The readouts study's ``results.json`` metrics and its claims.

:data:`METRIC_KEYS`, :data:`CLAIMS` and :func:`metrics`, a pure function of a
:class:`~workbench.analyses.readouts.results.ReadoutsResult` (its ``compute_metrics``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.arrays import finite_or_none
from workbench.claims import Claim

if TYPE_CHECKING:
    from workbench.analyses.readouts.results import ReadoutsResult

METRIC_KEYS = (
    "kl_logit_by_layer",
    "kl_last_block_by_layer",
    "kl_tuned_by_layer",
    "kl_tuned_minus_logit_max",
    "loss_logit_by_layer",
    "loss_last_block_by_layer",
    "loss_tuned_by_layer",
    "model_loss",
    "probe_accuracy_by_layer",
    "probe_control_by_layer",
    "probe_selectivity_by_layer",
    "steering_layer",
    "steering_effect",
    "steering_effect_random",
    "steering_effect_random_max",
    "steering_generation_base",
    "steering_generation_effect",
    "steering_generation_random_max",
)
"""The keys of :func:`metrics` (the ``metrics`` block of ``results.json``)."""

CLAIMS = (
    Claim(
        "the tuned lens is closer to the model than the logit lens (every layer but the last)",
        "kl_tuned_minus_logit_max",
        "<",
        0.0,
        paper="tuned lens, Fig. 2: lower KL at every layer",
    ),
    Claim(
        "the probe beats its control task (last layer)",
        "probe_selectivity_by_layer.-1",
        ">",
        0.0,
        paper="Hewitt & Liang: selectivity > 0",
    ),
    Claim(
        "steering beats every random vector of the same norm",
        "steering_effect",
        ">",
        "steering_effect_random_max",
        paper="difference-of-means steering vs random directions",
    ),
    Claim(
        "steering changes what the model writes more than every random vector of the same norm",
        "steering_generation_effect",
        ">",
        "steering_generation_random_max",
        paper="activation addition changes generations (Turner et al. 2023)",
    ),
)
"""The paper effects the default must show (see :mod:`workbench.claims`)."""


def _by_layer(result: ReadoutsResult, lens: str, metric: str) -> list[float] | None:
    curve = result.curve(lens)
    return None if curve is None else list(getattr(curve, metric))


def _largest_gap(tuned: list[float] | None, logit: list[float] | None) -> float | None:
    """``max(tuned - logit)`` over every layer but the last (where both are the model itself)."""
    if tuned is None or logit is None or len(tuned) < 2:
        return None
    return max(t - g for t, g in zip(tuned[:-1], logit[:-1], strict=True))


def metrics(result: ReadoutsResult) -> dict[str, Any]:
    """The ``results.json`` metrics block; its keys are :data:`METRIC_KEYS`.

    ``kl_tuned_minus_logit_max`` is the largest ``KL(tuned) - KL(logit)`` over every layer read
    but the last: negative when the tuned lens is the closer one at each of them (``None`` without
    the tuned lens, or with one layer read). ``steering_effect_random`` is the mean effect of the
    random vectors of the steering vector's norm, ``steering_effect_random_max`` the largest.
    """
    summary = result.probe.summary()
    kl_logit = _by_layer(result, "logit", "kl")
    kl_tuned = _by_layer(result, "tuned", "kl")
    return {
        "kl_logit_by_layer": kl_logit,
        "kl_last_block_by_layer": _by_layer(result, "last_block", "kl"),
        "kl_tuned_by_layer": kl_tuned,
        "kl_tuned_minus_logit_max": _largest_gap(kl_tuned, kl_logit),
        "loss_logit_by_layer": _by_layer(result, "logit", "loss"),
        "loss_last_block_by_layer": _by_layer(result, "last_block", "loss"),
        "loss_tuned_by_layer": _by_layer(result, "tuned", "loss"),
        "model_loss": result.model_loss,
        "probe_accuracy_by_layer": [float(x) for x in summary["accuracy"]],
        "probe_control_by_layer": [float(x) for x in summary["control"]],
        "probe_selectivity_by_layer": [float(x) for x in summary["selectivity"]],
        "steering_layer": result.steering.layer,
        "steering_effect": result.steering.effect_at_max,
        "steering_effect_random": result.steering.random_at_max,
        "steering_effect_random_max": finite_or_none(result.steering.random_max_at_max),
        "steering_generation_base": finite_or_none(result.steering.gen_base),
        "steering_generation_effect": finite_or_none(result.steering.gen_effect),
        "steering_generation_random_max": finite_or_none(result.steering.gen_random_max),
    }
