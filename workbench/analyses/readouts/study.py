"""The readouts study end to end: ``run(config, cache_dir)`` and its :data:`STUDY` record.

Units are cached (:class:`workbench.cache.UnitCache`): the tuned lens (a safetensors folder), each
lens's curve, the heatmap, the probe sweep and the steering test. A rerun with the same config
loads the model only if a unit is missing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from workbench.analyses.base import Study
from workbench.analyses.readouts import collect
from workbench.analyses.readouts.config import ReadoutsConfig
from workbench.analyses.readouts.results import LensCurve, ReadoutsResult, SteeringResult
from workbench.cache import UnitCache
from workbench.lens import LensResult
from workbench.models.lazy import LazySubject
from workbench.probes import ProbeSweepResult

ANALYSIS = "readouts"


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
    with LazySubject(lambda: collect.loaded(config)) as lazy:
        held_acts = functools.cache(lambda: collect.activations(lazy.get(), held, config))

        def curve(lens: str) -> Callable[[], LensCurve]:
            def compute() -> LensCurve:
                tuned = None
                if lens == "tuned":
                    folder = collect.lens_folder(cache_dir, key)
                    train = collect.activations(lazy.get(), train_texts, config)
                    tuned = collect.tuned_lens(lazy.get(), train, config, folder)
                    del train
                return collect.lens_curve(lazy.get(), lens, held, held_acts(), config, tuned)

            return compute

        curves = tuple(
            cache.get(f"curve-{lens}", curve(lens), LensCurve.from_dict) for lens in config.lenses
        )
        record = cache.load("heatmap")
        heat = LensResult.from_dict(record) if record else None
        if heat is None:
            heat = collect.heatmap(lazy.get(), held, config)
            cache.save("heatmap", heat.to_dict(full=True))
        probe = cache.get(
            "probe",
            lambda: collect.probe(lazy.get(), held_acts(), config),
            ProbeSweepResult.from_dict,
        )
        steering = cache.get(
            "steering",
            lambda: collect.steering(lazy.get(), held, held_acts(), config),
            SteeringResult.from_dict,
        )
    revision = heat.revision
    return ReadoutsResult(config.model, revision, curves, heat, probe, config.probe_task, steering)


STUDY = Study(
    name=ANALYSIS,
    config=ReadoutsConfig,
    result=ReadoutsResult,
    run=run,
    presets={
        "test": {
            "model": "tiny-lm",
            "text_sampling": "first",
            "n_texts": 48,
            "tuned_texts": 96,
            "tuned_init": "identity",
            "tuned_steps": 100,
            "max_length": 32,
            "lens": "logit,last_block,tuned",
            "lens_rows": None,
            "probe_cv": 3,
            "probe_seeds": 1,
            "steer_scale": 4.0,
            "steer_random": 4,
            "steer_texts": 48,
            "steer_new_tokens": 16,
            "device": "cpu",
        }
    },
    paper="logit lens, tuned lens (arXiv 2303.08112), probes with control tasks, steering",
)
"""The readouts study's record in :mod:`workbench.analyses.registry`."""
