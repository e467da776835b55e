"""The depth-ensemble study end to end: ``run(config, cache_dir)`` and the ``results.json`` metrics.

Order of work (bad input fails before anything trains): the scaling CSV is read and checked;
the model is loaded and its sites checked; then the model part, the toys and the fit. Units are
cached with :class:`workbench.cache.UnitCache`: the model's geometry, lens losses and layer
skipping (one record each, keyed by the model's fields), each teacher and each trained student
(keyed by :func:`workbench.cache.recipe_key` of the resolved toy preset, the seed and
:data:`VERSION`, so a new model reuses the toys), and the scaling
fit (keyed by the CSV's hash). A rerun with the same config loads and trains nothing.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from workbench.analyses.base import Study
from workbench.analyses.depth_ensemble import collect, compute, toys
from workbench.analyses.depth_ensemble.config import DepthEnsembleConfig
from workbench.analyses.depth_ensemble.results import (
    DepthEnsembleResult,
    LayerGeometry,
    LayerSkip,
    LensLoss,
    ModelResult,
)
from workbench.analyses.depth_ensemble.scaling import ScalingFit, fit_scaling_law, read_runs
from workbench.analyses.depth_ensemble.toy_results import ToyResult, ToyStudent, ToyTeacher
from workbench.cache import UnitCache, recipe_key
from workbench.models.lazy import LazySubject
from workbench.seeds import stream_seed

log = logging.getLogger(__name__)


ANALYSIS = "depth_ensemble"
VERSION = 3
"""Bumped when a cached record's meaning changes (2: the toys train on one thread; 3: the
teacher inputs and the students draw from named random streams, :mod:`workbench.seeds`)."""
GEOMETRY_INPUTS = 1024
"""Held-out inputs the toys' layer geometry is measured on."""


def model_part(
    config: DepthEnsembleConfig, cache_dir: str | os.PathLike[str] | None
) -> tuple[ModelResult, list[str]]:
    """Geometry, lens losses and layer skipping of the model (each unit cached)."""
    cache = UnitCache(cache_dir, "model-" + config.part_key(config.MODEL_FIELDS))
    lazy = LazySubject(lambda: collect.loaded(config))
    notes: list[str] = []
    try:
        info = cache.load("info")
        if info is None:
            subject = lazy.get()
            info = {
                "revision": subject.revision,
                "has_lm": collect.check_sites(subject),
                "n_layers": subject.n_layers,
            }
            cache.save("info", info)
        texts = collect.texts(config)
        geometry = cache.get(
            "geometry",
            lambda: compute.layer_geometry(collect.states(lazy.get(), texts, config)),
            LayerGeometry.from_dict,
        )
        lens = skip = None
        if info["has_lm"]:
            train_texts, held_out = collect.lens_texts(config)
            if not held_out:
                notes.append(
                    "the tuned lens trained on the measured texts (the source has no more)"
                )
            lens = cache.get(
                "lens",
                lambda: collect.lens_loss(lazy.get(), texts, train_texts, config),
                LensLoss.from_dict,
            )
            skip = cache.get(
                "skip",
                lambda: collect.layer_skip(
                    lazy.get(), collect.batches(lazy.get(), texts, config), config
                ),
                LayerSkip.from_dict,
            )
            if info["n_layers"] < 4:
                notes.append(
                    f"{config.model} has {info['n_layers']} layers: fewer than 2 middle layers, "
                    "so no reversal or shuffle"
                )
        else:
            notes.append(
                f"{config.model} has no language-model head: lens losses, early exits and layer "
                "skipping skipped (geometry only)"
            )
    finally:
        lazy.close()
    return ModelResult(config.model, info["revision"], geometry, lens, skip), notes


def toy_part(
    config: DepthEnsembleConfig,
    cache_dir: str | os.PathLike[str] | None,
    *,
    progress: bool = True,
) -> ToyResult:
    """Teachers and students (each cached), then the depth fits (recomputed: cheap)."""
    preset = config.toy
    recipe = {"preset": preset.to_dict(), "seed": config.seed, "version": VERSION}
    cache = UnitCache(cache_dir, "toys-" + recipe_key(recipe))
    device = "cpu" if config.device == "auto" else config.device
    if config.device == "auto":
        from workbench.models.loading import resolve_device

        device = str(resolve_device("auto"))
    teachers, students, fits = [], [], []
    units = [(kind, depth) for kind in config.teachers for depth in config.depths]
    bar = tqdm(total=len(units), desc="toy students", disable=not progress)
    with bar:
        for kind in config.teachers:
            data_holder: dict[str, Any] = {}

            def data(kind: str = kind, holder: dict[str, Any] = data_holder) -> Any:
                if "data" not in holder:  # the teacher runs once, only if a unit is missing
                    teacher = toys.make_teacher(kind, preset, config.seed)
                    holder["teacher"] = teacher
                    holder["data"] = toys.teacher_outputs(
                        teacher, preset, stream_seed(config.seed, "teacher inputs"), device
                    )
                return holder["data"]

            def measure_teacher(
                kind: str = kind, holder: dict[str, Any] = data_holder
            ) -> ToyTeacher:
                d = data(kind)
                states = toys.toy_states(holder["teacher"], d.x_test[:GEOMETRY_INPUTS])
                return ToyTeacher(
                    kind,
                    preset.teacher_depth,
                    preset.temperature,
                    toys.entropy(d.logp_test),
                    math.log(preset.vocab),
                    compute.layer_geometry(states),
                )

            teachers.append(cache.get(f"teacher-{kind}", measure_teacher, ToyTeacher.from_dict))
            mine = []
            for depth in config.depths:
                train = _student_trainer(kind, depth, data, config, device)
                mine.append(cache.get(f"student-{kind}-d{depth}", train, ToyStudent.from_dict))
                bar.update(1)
            students += mine
            fits.append(
                compute.fit_toy(
                    kind,
                    config.depths,
                    np.stack([s.per_example for s in mine]),
                    n_bootstrap=config.bootstrap,
                    seed=config.seed,
                )
            )
    log.info("toys cache: %d hit(s), %d computed", len(cache.hits), len(cache.misses))
    return ToyResult(preset.to_dict(), tuple(teachers), tuple(students), tuple(fits))


def _student_trainer(
    kind: str, depth: int, data: Callable[[], Any], config: DepthEnsembleConfig, device: str
) -> Callable[[], ToyStudent]:
    preset = config.toy

    def train() -> ToyStudent:
        d = data()
        started = time.perf_counter()
        run = toys.train_student(
            depth,
            d,
            preset,
            seed=stream_seed(config.seed, "student"),
            device=device,
            desc=f"{kind} d={depth}",
        )
        per_example = toys.per_example_kl(run.model, d.x_test, d.logp_test)
        tail = max(10, preset.steps // 100)
        geometry = compute.layer_geometry(toys.toy_states(run.model, d.x_test[:GEOMETRY_INPUTS]))
        return ToyStudent(
            kind,
            depth,
            preset.steps,
            float(per_example.mean()),
            float(np.mean(run.losses[-tail:])),
            per_example,
            geometry,
            time.perf_counter() - started,
        )

    return train


def scaling_part(
    config: DepthEnsembleConfig, cache_dir: str | os.PathLike[str] | None, runs: Any
) -> ScalingFit:
    """The scaling-law fit of the CSV's runs (cached by the file's hash)."""
    cache = UnitCache(cache_dir, "scaling")
    unit = f"fit-{runs.sha256[:16]}-b{config.bootstrap}-s{config.seed}-v{VERSION}"
    return cache.get(
        unit,
        lambda: fit_scaling_law(runs, n_bootstrap=config.bootstrap, seed=config.seed),
        ScalingFit.from_dict,
    )


def check(params: Mapping[str, Any]) -> DepthEnsembleConfig:
    """Checks notebook parameters before any kernel starts (``workbench run`` calls it).

    Builds the config (field checks) and reads the scaling CSV (missing columns, non-positive
    values); loads no model and trains nothing. The model's sites are checked when it loads,
    still before any toy trains.

    Raises:
        ConfigError, InputError: One line naming the bad value.
    """
    config = DepthEnsembleConfig.from_params(params)
    if config.scaling_csv.strip():
        read_runs(config.scaling_csv)
    return config


def run(
    config: DepthEnsembleConfig,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> DepthEnsembleResult:
    """The whole study: the model's layers, the teacher-student toys and the scaling fit.

    Args:
        config: The study's parameters.
        cache_dir: Folder of the per-unit cache (``None``: compute everything, store nothing).
        progress: Show progress bars.

    Raises:
        InputError: A bad scaling CSV (before anything loads or trains).
        SiteError: A model without the sites the geometry needs (before the toys train).
    """
    runs = read_runs(config.scaling_csv) if config.scaling_csv.strip() else None
    notes: list[str] = []
    model = None
    if config.has_model:
        model, model_notes = model_part(config, cache_dir)
        notes += model_notes
    with toys.single_thread():  # teachers, students and their evaluation: core-count free
        toy = toy_part(config, cache_dir, progress=progress)
    scaling = scaling_part(config, cache_dir, runs) if runs is not None else None
    if scaling is None:
        notes.append("scaling_csv is empty: no scaling-law fit")
    notes += _toy_notes(config, toy)
    return DepthEnsembleResult(model, toy, scaling, tuple(notes))


def _toy_notes(config: DepthEnsembleConfig, toy: ToyResult) -> list[str]:
    preset = toy.preset
    notes = []
    if config.preset == "cpu":
        notes.append(
            f"toys on the cpu preset: {preset['steps']} steps of batch {preset['batch_size']} "
            f"from a pool of {preset['pool']} inputs at temperature {preset['temperature']:g}; "
            "the paper trains 40k steps of batch 1024 at lower temperatures (preset='paper')"
        )
    for teacher in toy.teachers:
        notes.append(
            f"{teacher.kind} teacher: entropy {teacher.entropy:.2f} of {teacher.max_entropy:.2f} "
            "nats"
        )
    return notes


STUDY = Study(
    name=ANALYSIS,
    config=DepthEnsembleConfig,
    result=DepthEnsembleResult,
    run=run,
    check=check,
    paper="Inverse depth scaling from most layers being similar (arXiv 2602.05970)",
)
"""The depth-ensemble study's record in :mod:`workbench.analyses.registry`."""
