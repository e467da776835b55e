"""The readouts study end to end: ``run(config, cache_dir)`` and the ``results.json`` metrics.

Units are cached (:class:`workbench.cache.UnitCache`): the tuned lens (a safetensors folder), each
lens's curve, the heatmap, the probe sweep and the steering test. A rerun with the same config
loads the model only if a unit is missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.analyses.base import save_study
from workbench.analyses.readouts import collect
from workbench.analyses.readouts.config import ReadoutsConfig
from workbench.analyses.readouts.results import LensCurve, ReadoutsResult, SteeringResult
from workbench.arrays import finite_or_none
from workbench.cache import UnitCache
from workbench.capturing import Activations
from workbench.claims import Claim, ClaimTable, evaluate
from workbench.lens import LensResult
from workbench.models import Subject
from workbench.probes import ProbeSweepResult

ANALYSIS = "readouts"
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


def run(
    config: ReadoutsConfig,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> ReadoutsResult:
    """Lenses, probes and steering on one model, every unit cached.

    Args:
        config: The study's parameters.
        cache_dir: Folder of the per-unit cache (``None``: compute everything, store nothing).
        progress: Unused (the units are few); kept for the common study signature.
    """
    key = config.key()
    cache = UnitCache(cache_dir, key)
    train_texts, held = collect.texts(config)
    loaded: dict[str, Any] = {}

    def subject() -> Subject:
        if "s" not in loaded:
            loaded["s"] = collect.load(config)
        return loaded["s"]

    def held_acts() -> Activations:
        if "held" not in loaded:
            loaded["held"] = collect.activations(subject(), held, config)
        return loaded["held"]

    def curve(lens: str) -> Callable[[], LensCurve]:
        def compute() -> LensCurve:
            tuned = None
            if lens == "tuned":
                folder = collect.lens_folder(cache_dir, key)
                train = collect.activations(subject(), train_texts, config)
                tuned = collect.tuned_lens(subject(), train, config, folder)
                del train
            return collect.lens_curve(subject(), lens, held, held_acts(), config, tuned)

        return compute

    curves = tuple(
        cache.get(f"curve-{lens}", curve(lens), LensCurve.from_dict) for lens in config.lenses
    )
    record = cache.load("heatmap")
    heat = LensResult.from_dict(record) if record else None
    if heat is None:
        heat = collect.heatmap(subject(), held, config)
        cache.save("heatmap", heat.to_dict(full=True))
    probe = cache.get(
        "probe", lambda: collect.probe(subject(), held_acts(), config), ProbeSweepResult.from_dict
    )
    steering = cache.get(
        "steering",
        lambda: collect.steering(subject(), held, held_acts(), config),
        SteeringResult.from_dict,
    )
    revision = heat.revision
    return ReadoutsResult(config.model, revision, curves, heat, probe, config.probe_task, steering)


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


def save(
    result: ReadoutsResult,
    config: ReadoutsConfig,
    out_dir: str | os.PathLike[str],
    figures: Sequence[str | os.PathLike[str]] = (),
) -> Path:
    """Writes ``out_dir/results.json`` (metrics, parameters, figures, model and revision)."""
    return save_study(
        ANALYSIS,
        config,
        metrics(result),
        out_dir,
        figures,
        revision=result.revision,
        notes=result.notes,
        claims=CLAIMS,
    )


def claims(result) -> ClaimTable:
    """The study's :data:`CLAIMS` checked on ``result`` (a table in a notebook)."""
    return evaluate(CLAIMS, metrics(result))
