"""The concept-oscillation study end to end: ``run(config, cache_dir)`` and its metrics.

The trained toy is a :func:`workbench.cache.trained` artifact in the cache's ``toys`` folder
(keyed by its whole recipe, :func:`toy_recipe`: spec, steps, seed, device, version), and the
model's readouts of the case set (with the probe) a :class:`workbench.cache.UnitCache` unit. A
rerun with the same config trains and loads nothing; the follow curve, its bootstrap, the groups
and the oscillation counts are recomputed from the readouts (milliseconds).

Bad input fails before any model loads: the config (:class:`ConceptOscillationConfig`), the cases
file (missing fields by line, too few cases) and, where the model's config and tokenizer can be
read on their own, a model without an unembedding and answers that tokenize to nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from workbench.analyses.base import Study
from workbench.analyses.concept_oscillation import collect, compute
from workbench.analyses.concept_oscillation.cases import CaseSet
from workbench.analyses.concept_oscillation.config import ConceptOscillationConfig
from workbench.analyses.concept_oscillation.results import (
    CaseRun,
    ConceptOscillationResult,
    Readout,
)
from workbench.analyses.concept_oscillation.toy import ToySpec, toy_cases
from workbench.arrays import plain
from workbench.cache import UnitCache, trained, trained_folder
from workbench.criteria import report
from workbench.files import atomic_write_json

log = logging.getLogger(__name__)

ANALYSIS = "concept_oscillation"

"""The keys of :func:`metrics` (the ``metrics`` block of ``results.json``): the issue's ten, then
the binned follow curve and whether it is monotone, ambiguous/clear ratio, case counts, the
probe accuracy at every layer; then the ratio's bootstrap 95% interval, the lens the oscillations
were counted with, the depth, where the lens first shows the final answer for good (mean layer
and the share of conflicts decided from the first layer), and the toy's training steps and
seconds, and how far it is from the Bayes-optimal predictor on held-out prompts (excess KL in
nats, share of prompts whose top colour is the Bayes one; ``None`` for other models); last, the
share of controls the model answers with ``Y_b`` (the relevant source's answer), overall and, for
the toy, per tier of channel B (a toy that has not learned the channel's longer chains answers
them at chance between the chain's end and the decoy's)."""
SPEC = ToySpec()
"""The toy task of the embedded default."""
CONTROL_SHARE = 2
"""The toy evaluates ``n_cases // CONTROL_SHARE`` control cases."""


def cases_for(config: ConceptOscillationConfig) -> CaseSet:
    """The run's cases: generated for the toy with ``cases="builtin"``, else read from a file.

    Raises:
        CasesError: A bad cases file (see :func:`collect.file_cases`).
    """
    if config.is_toy and str(config.cases).strip() == "builtin":
        return toy_cases(SPEC, config.n_cases, config.n_cases // CONTROL_SHARE, config.seed)
    return collect.file_cases(config)


def check(params: Mapping[str, Any]) -> ConceptOscillationConfig:
    """Validates notebook parameters and the cases without loading a model (for a runner).

    Raises:
        ConfigError, CasesError, LensError: One-line errors (see the module docstring).
    """
    config = ConceptOscillationConfig.from_params(params)
    precheck(config, cases_for(config))
    return config


def precheck(config: ConceptOscillationConfig, cases: CaseSet) -> None:
    """What can be checked of a real model before its weights load (see the module docstring)."""
    if config.is_toy:
        return
    collect.precheck(config.model)
    tokenizer, context = collect.model_tokenizer(config.model)
    if tokenizer is not None:
        collect.usable_cases(tokenizer, cases, context)


TOY_SUMMARY = "summary.json"
"""The trained toy's training summary, beside its checkpoint."""
READOUT_IGNORES = ("n_bootstrap",)
"""Fields that do not change the model's readouts (the bootstrap is recomputed from them)."""


@contextlib.contextmanager
def _toys(cache_dir: str | os.PathLike[str] | None) -> Iterator[Path]:
    """The folder of trained toys: the cache's ``toys``, else one as long-lived as the run."""
    if cache_dir is not None:
        yield Path(cache_dir) / "toys"
        return
    with tempfile.TemporaryDirectory(prefix="toy-decoder-") as tmp:
        yield Path(tmp)


def toy_recipe(config: ConceptOscillationConfig) -> dict[str, Any]:
    """Everything the trained toy depends on (its cache key, :func:`workbench.cache.trained`).

    The toy's data is generated from :data:`SPEC` and the seed; the study's cache version stands
    for the training code.
    """
    return {
        "spec": asdict(SPEC),
        "steps": config.toy_steps,
        "target_kl": config.toy_target_kl or None,
        "max_steps": config.toy_max_steps if config.toy_target_kl else None,
        "seed": config.seed,
        "device": "cpu" if config.device == "auto" else config.device,
        "version": config.CACHE_VERSION,
    }


def toy_model(
    config: ConceptOscillationConfig, root: Path, progress: bool = True
) -> tuple[str, dict[str, Any]]:
    """The trained toy's folder and training summary, trained on first use.

    Args:
        config: The study's parameters (``seed``, ``toy_steps``, ``toy_target_kl``,
            ``toy_max_steps``, ``device``).
        root: The folder of trained toys (a cache's ``toys``, or a scratch folder).
        progress: Show the training's progress bar.

    A toy that reaches ``toy_max_steps`` before its excess KL comes down to ``toy_target_kl`` is
    kept, its summary saying ``"converged": false``; the result reports the shortfall.
    """
    from workbench.analyses.concept_oscillation.train_toy import train_toy

    recipe = toy_recipe(config)

    def build(out: Path) -> None:
        _, summary = train_toy(
            SPEC,
            out,
            steps=recipe["steps"],
            seed=recipe["seed"],
            target_kl=recipe["target_kl"],
            max_steps=recipe["max_steps"],
            device=recipe["device"],
            progress=progress,
        )
        atomic_write_json(out / TOY_SUMMARY, plain(summary))

    folder = trained(root, "toy-decoder", recipe, build)
    return str(folder), json.loads((folder / TOY_SUMMARY).read_text())


def readouts(config: ConceptOscillationConfig, model: str, cases: CaseSet) -> CaseRun:
    """Loads the model once and reads out the conflicts and the controls (and fits the probe)."""
    with collect.loaded(model, config.device) as subject:
        context = collect.context_length(subject.model.config)
        cases, notes = collect.usable_cases(subject.tokenizer, cases, context)
        lens = None
        if config.lens == "tuned":
            lens = collect.train_lens(subject, cases, config.seed, config.batch_size)
        fields, _ = collect.readout(subject, cases.conflicts, lens, config.batch_size)
        controls = Readout(**collect.readout(subject, cases.controls, lens, config.batch_size)[0])
    conflicts = Readout(**fields)
    used = conflicts.follow_a | conflicts.follow_b
    relation = compute.relation_features(conflicts.lens_diff, conflicts.layers)
    probe, why = compute.probe_curve(relation, conflicts.follow_a, used, seed=config.seed)
    notes += [why] if why else []
    return CaseRun(config.model, config.lens, conflicts, controls, probe, tuple(notes))


def run(
    config: ConceptOscillationConfig,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> ConceptOscillationResult:
    """The whole study: cases, (the toy's training,) the model's readouts, then the analysis.

    Args:
        config: The study's parameters.
        cache_dir: Folder of the per-unit cache (``None``: compute everything, keep nothing).
        progress: Show progress bars (the toy's training).
    """
    cases = cases_for(config)
    precheck(config, cases)
    cache = UnitCache(cache_dir, config.key(*READOUT_IGNORES))
    training: dict[str, Any] | None = None

    def measure() -> CaseRun:
        nonlocal training
        model = config.model
        if config.is_toy:
            model, training = toy_model(config, toys, progress)
        return readouts(config, model, cases)

    with _toys(cache_dir) as toys:
        case_run = cache.get("readouts", measure, CaseRun.from_dict)
        if config.is_toy and training is None:  # readouts cached: the toy's record, if kept
            summary = trained_folder(toys, "toy-decoder", toy_recipe(config)) / TOY_SUMMARY
            training = json.loads(summary.read_text()) if summary.is_file() else None
    log.info("cache: %d hit(s), %d computed", len(cache.hits), len(cache.misses))
    result = compute.analyze(
        case_run,
        n_bootstrap=config.n_bootstrap,
        seed=config.seed,
        cases=cases.source,
        training=training,
    )
    report(result.shortfalls())
    return result


STUDY = Study(
    name=ANALYSIS,
    config=ConceptOscillationConfig,
    result=ConceptOscillationResult,
    run=run,
    check=check,
    paper="Modality conflicts in MLLMs (arXiv 2511.02243)",
)
"""The concept-oscillation study's record in :mod:`workbench.analyses.registry`."""
