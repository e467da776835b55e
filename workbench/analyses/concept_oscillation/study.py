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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from workbench.analyses.base import save_study
from workbench.analyses.concept_oscillation import collect, compute
from workbench.analyses.concept_oscillation.cases import CaseSet
from workbench.analyses.concept_oscillation.config import TOY, ConceptOscillationConfig
from workbench.analyses.concept_oscillation.results import (
    CaseRun,
    ConceptOscillationResult,
    Readout,
)
from workbench.analyses.concept_oscillation.toy import ToySpec, tier_of, toy_cases
from workbench.arrays import finite_or_none, plain
from workbench.cache import UnitCache, trained, trained_folder
from workbench.claims import Claim, ClaimTable, evaluate
from workbench.errors import ToyNotLearnedError
from workbench.files import atomic_write_json

log = logging.getLogger(__name__)

ANALYSIS = "concept_oscillation"
METRIC_KEYS = (
    "follow_slope",
    "balance_point",
    "balance_point_ci",
    "oscillations_ambiguous",
    "oscillations_clear",
    "oscillations_control",
    "n_ambiguous",
    "n_clear",
    "probe_best_layer",
    "probe_best_accuracy",
    "follow_monotone",
    "follow_binned",
    "oscillation_ratio",
    "n_conflicts",
    "n_controls",
    "n_follow_a",
    "n_follow_b",
    "n_other",
    "probe_by_layer",
    "oscillation_ratio_ci",
    "oscillation_lens",
    "n_layers",
    "decision_layer_mean",
    "decided_at_first_layer",
    "training_steps",
    "training_seconds",
    "toy_excess_kl",
    "toy_bayes_agreement",
    "controls_answer_b",
    "controls_answer_b_by_tier",
)

CLAIMS = (
    Claim(
        "P(follow A) falls with relative uncertainty",
        "follow_slope",
        "<",
        0.0,
        paper="Fig. 2: decreasing for six models",
    ),
    Claim("the follow curve is monotone", "follow_monotone", ">=", 1.0),
    Claim(
        "ambiguous conflicts oscillate at least 1.5x as often as clear ones",
        "oscillations_ambiguous",
        ">=",
        "oscillations_clear",
        factor=1.5,
        paper="1.43 vs 0.71 (LLaVA-1.6-7B)",
    ),
    Claim(
        "controls oscillate least",
        "oscillations_control",
        "<",
        "oscillations_clear",
        paper="0.35 for controls",
    ),
)
"""The paper effects the default must show (see :mod:`workbench.claims`)."""
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

    Raises:
        ToyNotLearnedError: ``toy_max_steps`` was reached before the excess KL came down to
            ``toy_target_kl`` (nothing is cached).
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
        if summary["converged"] is False:
            raise ToyNotLearnedError(
                f"the toy decoder (seed {recipe['seed']}) did not reach its criterion within "
                f"{recipe['max_steps']} steps: excess KL {summary['excess_kl']:.3f} nats, "
                f"criterion <= {recipe['target_kl']}; raise toy_max_steps or toy_steps"
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
    return compute.analyze(
        case_run,
        n_bootstrap=config.n_bootstrap,
        seed=config.seed,
        cases=cases.source,
        training=training,
    )


def _r4(value: float | None) -> float | None:
    return finite_or_none(value, 4)


def metrics(result: ConceptOscillationResult) -> dict[str, Any]:
    """The ``results.json`` metrics block; its keys are :data:`METRIC_KEYS`."""
    follow, osc, probe = result.follow, result.oscillations, result.probe
    conflicts, controls = result.run.conflicts, result.run.controls
    decided = compute.decision_layers(conflicts.lens_top1, conflicts.top1)
    training = result.training
    return {
        "follow_slope": _r4(follow.slope),
        "balance_point": _r4(follow.balance_point),
        "balance_point_ci": None
        if follow.balance_ci is None
        else [_r4(v) for v in follow.balance_ci],
        "oscillations_ambiguous": _r4(osc.mean("ambiguous")),
        "oscillations_clear": _r4(osc.mean("clear")),
        "oscillations_control": _r4(osc.mean("control")),
        "n_ambiguous": len(osc.ambiguous),
        "n_clear": len(osc.clear),
        "probe_best_layer": None if probe is None else probe.best_layer,
        "probe_best_accuracy": None if probe is None else _r4(probe.best_accuracy),
        "follow_monotone": follow.monotone,
        "follow_binned": {
            "dh": [_r4(v) for v in follow.bin_centers],
            "p_follow_a": [_r4(v) for v in follow.bin_rates],
            "n": follow.bin_counts.tolist(),
        },
        "oscillation_ratio": _r4(osc.ratio),
        "n_conflicts": conflicts.n,
        "n_controls": result.run.controls.n,
        "n_follow_a": int(conflicts.follow_a.sum()),
        "n_follow_b": int(conflicts.follow_b.sum()),
        "n_other": int(conflicts.n - (conflicts.follow_a | conflicts.follow_b).sum()),
        "probe_by_layer": None if probe is None else [_r4(v) for v in probe.accuracy],
        "oscillation_ratio_ci": None
        if result.ratio_ci is None
        else [_r4(v) for v in result.ratio_ci],
        "oscillation_lens": result.lens,
        "n_layers": len(conflicts.layers),
        "decision_layer_mean": _r4(decided.mean()) if len(decided) else None,
        "decided_at_first_layer": _r4((decided == 0).mean()) if len(decided) else None,
        "training_steps": None if training is None else training.get("steps"),
        "training_seconds": None if training is None else training.get("seconds"),
        "toy_excess_kl": _r4(training.get("excess_kl")) if training else None,
        "toy_bayes_agreement": _r4(training.get("bayes_agreement")) if training else None,
        "controls_answer_b": _r4((controls.top1 == controls.y_b).mean()) if controls.n else None,
        "controls_answer_b_by_tier": _controls_by_tier(controls)
        if result.run.model == TOY
        else None,
    }


def _controls_by_tier(controls: Readout) -> list[float] | None:
    """Share of the toy's controls answered ``Y_b``, per tier of channel B (its hops minus one)."""
    tiers = [tier_of(case_id) for case_id in controls.ids]
    if not controls.n or any(t is None for t in tiers):
        return None
    rates = compute.answer_rate_by_group(
        controls.top1, controls.y_b, [t[1] for t in tiers if t is not None]
    )
    return [_r4(rates.get(tier, float("nan"))) for tier in range(len(SPEC.eps_b))]


def save(
    result: ConceptOscillationResult,
    config: ConceptOscillationConfig,
    out_dir: str | os.PathLike[str],
    figures: Sequence[str | os.PathLike[str]] = (),
) -> Path:
    """Writes ``out_dir/results.json`` (metrics, parameters, figures, model, notes)."""
    return save_study(
        ANALYSIS, config, metrics(result), out_dir, figures, notes=result.notes, claims=CLAIMS
    )


def claims(result) -> ClaimTable:
    """The study's :data:`CLAIMS` checked on ``result`` (a table in a notebook)."""
    return evaluate(CLAIMS, metrics(result))
