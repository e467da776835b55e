"""The only part of the readouts study that touches the model: lenses, captures, steering runs.

Each function takes a loaded :class:`~workbench.Subject` and returns results of the workbench's
readout layer (:mod:`workbench.lens`, :mod:`workbench.probes`, :mod:`workbench.interventions`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from workbench.analyses.readouts import compute
from workbench.analyses.readouts.config import ReadoutsConfig
from workbench.analyses.readouts.results import LensCurve, SteeringResult
from workbench.capturing import Activations, capture
from workbench.errors import ConfigError
from workbench.inputs import read_texts
from workbench.interventions import add, intervene, steering_vector
from workbench.lens import LensResult, TunedLens, last_block_lens, logit_lens
from workbench.models import Subject, load_model, quiet_transformers
from workbench.probes import ProbeSweepResult, probe_sweep

STEER_TEXTS = 64
"""Held-out texts the steering test runs on (each scale is a forward pass over them)."""
SCALE_FRACTIONS = (0.0, 0.25, 0.5, 1.0)
"""The steering scales, as fractions of ``steer_scale``."""
HEATMAP_TOKENS = 24
"""Positions of the heatmap's text."""


def texts(config: ReadoutsConfig) -> tuple[list[str], list[str]]:
    """``(tuned-lens training texts, held-out texts)``: the first ``tuned_texts``, then the next.

    Raises:
        ConfigError: The source has fewer than ``tuned_texts + n_texts`` texts.
    """
    need = config.tuned_texts + config.n_texts
    found = read_texts(config.text_source, need)
    if len(found) < need:
        raise ConfigError(
            f"text_source {config.text_source!r} has {len(found)} texts; tuned_texts + n_texts "
            f"= {need} are needed (lower one of them)"
        )
    return found[: config.tuned_texts], found[config.tuned_texts :]


def load(config: ReadoutsConfig) -> Subject:
    """The model, quietly."""
    quiet_transformers()
    return load_model(config.model, device=config.device)


def pieces(subject: Subject) -> list[str]:
    """Each token id's vocabulary piece (``""`` past the tokenizer's vocabulary)."""
    vocab = int(subject.model.get_input_embeddings().num_embeddings)
    known = min(vocab, len(subject.tokenizer))
    found = subject.tokenizer.convert_ids_to_tokens(list(range(known)))
    return [p or "" for p in found] + [""] * (vocab - known)


def tuned_lens(
    subject: Subject, train_texts: list[str], config: ReadoutsConfig, folder: Path | None
) -> TunedLens:
    """The tuned lens, trained once and kept in ``folder`` (safetensors + manifest)."""
    if folder is not None and (folder / "tuned_lens.json").is_file():
        return TunedLens.load(folder, subject)
    lens = TunedLens.train(
        subject,
        train_texts,
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
        seed=config.seed,
    )
    if folder is not None:
        lens.save(folder)
    return lens


def lens_curve(
    subject: Subject, lens: str, held: list[str], config: ReadoutsConfig, tuned: TunedLens | None
) -> LensCurve:
    """One lens on the held-out texts: its numbers by layer and the model's own loss."""
    options = {
        "layers": config.layers,
        "max_length": config.max_length,
        "batch_size": config.batch_size,
    }
    if lens == "logit":
        result = logit_lens(subject, held, **options)
    elif lens == "last_block":
        result = last_block_lens(subject, held, **options)
    else:
        assert tuned is not None
        result = tuned.apply(subject, held, **options)
    return LensCurve.of(result)


def heatmap(subject: Subject, held: list[str], config: ReadoutsConfig) -> LensResult:
    """The logit lens on the first held-out text, every position (the classic picture)."""
    return logit_lens(
        subject, held[:1], layers=config.layers, max_length=min(HEATMAP_TOKENS, config.max_length)
    )


def probe(subject: Subject, held: list[str], config: ReadoutsConfig) -> ProbeSweepResult:
    """The probe sweep over ``resid_post`` at the selected layers, with a control task."""
    acts = capture(
        subject,
        held,
        sites="resid_post",
        layers=config.layers,
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
    )
    keep, labels, offsets = compute.probe_labels(
        acts.offsets.numpy(), acts.token_ids.numpy(), pieces(subject), config.probe_task
    )
    mask = torch.from_numpy(keep)
    kept = Activations(
        {name: acts[name][mask] for name in acts.sites},
        torch.from_numpy(offsets),
        acts.token_ids[mask],
        meta=acts.meta,
    )
    return probe_sweep(
        kept,
        labels,
        cv=config.probe_cv,
        seeds=config.probe_seeds,
        control="control_task",
        random_state=config.seed,
        progress=False,
    )


def steering(subject: Subject, held: list[str], config: ReadoutsConfig) -> SteeringResult:
    """Steers ``resid_post.L`` with the difference of means of "next token starts a word".

    The vector is the mean residual at positions whose next token starts a word minus the mean
    at the others (the word-start labels, whatever the probe task). Each scale adds it at every
    position; the readout is the next-token probability mass on word-starting tokens, against
    random vectors of the same norm.
    """
    layer = subject.n_layers // 2 if config.steer_layer is None else config.steer_layer
    site = subject.site(f"resid_post.{layer}").name
    sample = held[:STEER_TEXTS]
    options = {"max_length": config.max_length, "batch_size": config.batch_size}
    acts = capture(subject, sample, sites=site, progress=False, **options)
    vocab = pieces(subject)
    keep, labels, _ = compute.probe_labels(
        acts.offsets.numpy(), acts.token_ids.numpy(), vocab, "word_start"
    )
    x = acts[site][torch.from_numpy(keep)]
    on = torch.from_numpy(labels.astype(bool))
    if on.all() or not on.any():
        raise ConfigError("the held-out texts have no contrast of word-start labels to steer by")
    vector = steering_vector(x[on], x[~on])
    norm = float(vector.norm())
    word = torch.tensor([compute.starts_word(p) for p in vocab])
    randoms = compute.random_directions(vector.numel(), config.steer_random, norm, config.seed)
    scales = [f * config.steer_scale for f in SCALE_FRACTIONS]

    def mass(direction: torch.Tensor, scale: float) -> float:
        with intervene(subject, {site: add(direction, scale=scale)}):
            logits = capture(subject, sample, sites="unembed", progress=False, **options)
        return float(compute.word_mass(logits["unembed"], word).mean())

    base = mass(vector, 0.0)
    effect = [0.0] + [mass(vector, s) - base for s in scales[1:]]
    random = [[0.0] + [mass(r, s) - base for s in scales[1:]] for r in randoms]
    return SteeringResult(
        layer, norm, tuple(scales), tuple(effect), tuple(map(tuple, random)), base, len(x)
    )


def lens_folder(cache_dir: str | os.PathLike[str] | None, key: str) -> Path | None:
    """Where the tuned lens is kept (``None`` without a cache)."""
    return None if cache_dir is None else Path(cache_dir) / key / "tuned-lens"


__all__ = [
    "heatmap",
    "lens_curve",
    "lens_folder",
    "load",
    "pieces",
    "probe",
    "steering",
    "texts",
    "tuned_lens",
]
