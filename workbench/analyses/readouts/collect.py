"""The only part of the readouts study that touches the model: lenses, captures, steering runs.

Each function takes a loaded :class:`~workbench.Subject` and returns results of the workbench's
readout layer (:mod:`workbench.lens`, :mod:`workbench.probes`, :mod:`workbench.interventions`).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from workbench.analyses.readouts import compute
from workbench.analyses.readouts.config import ReadoutsConfig
from workbench.analyses.readouts.results import LensCurve, SteeringResult
from workbench.capturing import Activations, capture
from workbench.errors import ConfigError
from workbench.inputs import read_texts
from workbench.interventions import add, intervene, steering_vector
from workbench.lens import (
    LensResult,
    TunedLens,
    activations_lens,
    last_block_lens,
    logit_lens,
)
from workbench.models import Subject, load_model, quiet_transformers
from workbench.probes import ProbeSweepResult, probe_sweep
from workbench.seeds import rng
from workbench.textcache import TextCache

SCALE_FRACTIONS = (0.0, 0.5, 1.0)
"""The steering scales, as fractions of ``steer_scale``."""
HEATMAP_TOKENS = 24
"""Positions of the heatmap's text."""


def texts(config: ReadoutsConfig) -> tuple[list[str], list[str]]:
    """``(tuned-lens training texts, held-out texts)`` (see ``text_sampling``).

    Raises:
        ConfigError: The source has fewer texts than the two sets need.
    """
    need = config.tuned_texts + config.n_texts
    if config.text_sampling == "first":
        found = read_texts(config.text_source, need)
        if len(found) < need:
            raise ConfigError(
                f"text_source {config.text_source!r} has {len(found)} texts; tuned_texts + "
                f"n_texts = {need} are needed (lower one of them)"
            )
        return found[: config.tuned_texts], found[config.tuned_texts :]
    pool = read_texts(config.text_source, config.text_pool)
    if len(pool) < need:
        raise ConfigError(
            f"text_source {config.text_source!r} has {len(pool)} texts; tuned_texts + n_texts = "
            f"{need} are needed (lower one of them)"
        )
    order = rng(config.seed, "readouts texts").permutation(len(pool))[:need]
    chosen = [pool[i] for i in order]
    return chosen[: config.tuned_texts], chosen[config.tuned_texts :]


def activations(subject: Subject, texts: list[str], config: ReadoutsConfig) -> Activations:
    """``resid_post`` at every layer for ``texts``, through the per-text activation cache.

    A text's activations do not depend on the seed, so a replication computes each once (see
    :mod:`workbench.textcache`).
    """
    cache = TextCache(subject, sites="resid_post", layers="all", max_length=config.max_length)
    return cache.capture(texts)


def lens_rows(acts: Activations, config: ReadoutsConfig) -> np.ndarray | None:
    """The held-out rows the lens curves read (ascending), or ``None`` for every row.

    ``lens_rows`` positions that have a next token, drawn by the seed.
    """
    if config.lens_rows is None:
        return None
    offsets = acts.offsets.numpy()
    has_next = np.ones(int(offsets[-1]), dtype=bool)
    has_next[offsets[1:] - 1] = False
    candidates = np.flatnonzero(has_next)
    if config.lens_rows >= len(candidates):
        return candidates
    picked = rng(config.seed, "readouts lens rows").choice(
        candidates, config.lens_rows, replace=False
    )
    return np.sort(picked)


@contextlib.contextmanager
def loaded(config: ReadoutsConfig) -> Iterator[Subject]:
    """The model for the block, loaded quietly and freed afterwards."""
    quiet_transformers()
    subject = load_model(config.model, device=config.device)
    try:
        yield subject
    finally:
        del subject
        gc.collect()


def pieces(subject: Subject) -> list[str]:
    """Each token id's vocabulary piece (``""`` past the tokenizer's vocabulary)."""
    vocab = int(subject.model.get_input_embeddings().num_embeddings)
    known = min(vocab, len(subject.tokenizer))
    found = subject.tokenizer.convert_ids_to_tokens(list(range(known)))
    return [p or "" for p in found] + [""] * (vocab - known)


def tuned_lens(
    subject: Subject, train: Activations, config: ReadoutsConfig, folder: Path | None
) -> TunedLens:
    """The tuned lens, fitted on the training texts' activations and kept in ``folder``."""
    if folder is not None and (folder / "tuned_lens.json").is_file():
        return TunedLens.load(folder, subject)
    lens = TunedLens.fit(
        subject,
        train,
        seed=config.seed,
        steps=config.tuned_steps,
        init=config.tuned_init,
    )
    if folder is not None:
        lens.save(folder)
    return lens


def lens_curve(
    subject: Subject,
    lens: str,
    held: list[str],
    held_acts: Activations,
    config: ReadoutsConfig,
    tuned: TunedLens | None,
) -> LensCurve:
    """One lens on the held-out texts: its numbers by layer and the model's own loss.

    The logit and tuned lenses read the cached activations at the sampled rows
    (:func:`lens_rows`); the last-block lens runs the model (one pass per layer) on every
    position of the held-out texts.
    """
    if lens == "last_block":
        result = last_block_lens(
            subject,
            held,
            layers=config.layers,
            max_length=config.max_length,
            batch_size=config.batch_size,
        )
        return LensCurve.of(result)
    rows = lens_rows(held_acts, config)
    if lens == "logit":
        result = activations_lens(subject, held_acts, layers=config.layers, rows=rows)
    else:
        assert tuned is not None
        result = tuned.read(subject, held_acts, layers=config.layers, rows=rows)
    return LensCurve.of(result)


def heatmap(subject: Subject, held: list[str], config: ReadoutsConfig) -> LensResult:
    """The logit lens on the first held-out text, every position (the classic picture)."""
    return logit_lens(
        subject, held[:1], layers=config.layers, max_length=min(HEATMAP_TOKENS, config.max_length)
    )


def probe(subject: Subject, held_acts: Activations, config: ReadoutsConfig) -> ProbeSweepResult:
    """The probe sweep over ``resid_post`` at the selected layers, with a control task."""
    names = [site.name for site in subject.expand("resid_post", config.layers)]
    keep, labels, offsets = compute.probe_labels(
        held_acts.offsets.numpy(), held_acts.token_ids.numpy(), pieces(subject), config.probe_task
    )
    mask = torch.from_numpy(keep)
    kept = Activations(
        {name: held_acts[name][mask] for name in names},
        torch.from_numpy(offsets),
        held_acts.token_ids[mask],
        meta=held_acts.meta,
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


def steering(
    subject: Subject, held: list[str], held_acts: Activations, config: ReadoutsConfig
) -> SteeringResult:
    """Steers ``resid_post.L`` with the difference of means of "next token starts a word".

    The vector is the mean residual (over every held-out text) at positions whose next token
    starts a word minus the mean at the others (the word-start labels, whatever the probe task),
    leaving out each text's first position: in many LMs it is an attention sink whose few
    *massive* coordinates are hundreds of times the others (Sun et al. 2024, arXiv 2402.17762);
    on SmolLM2 those rows alone made up 83-98% of the vector's squared norm, so that the
    vector's norm (and with it the random vectors' norm) was set by which class the texts' first
    tokens happened to fall in.
    Each scale adds it at every position of the first ``steer_texts`` held-out texts; the readout
    is the next-token probability mass on word-starting tokens, against random vectors of the
    same norm. With ``steer_new_tokens``, the same vectors at the largest scale also steer greedy
    continuations of those texts' first tokens, and the readout is what the model *writes*: the
    share of word-starting tokens among the generated ones.
    """
    layer = subject.n_layers // 2 if config.steer_layer is None else config.steer_layer
    site = subject.site(f"resid_post.{layer}").name
    vocab = pieces(subject)
    offsets = held_acts.offsets.numpy()
    keep, labels, _ = compute.probe_labels(
        offsets, held_acts.token_ids.numpy(), vocab, "word_start"
    )
    first = np.zeros(len(keep), dtype=bool)
    first[offsets[:-1]] = True  # each text's first position: see the docstring
    labels = labels[~first[keep]]
    x = held_acts[site][torch.from_numpy(keep & ~first)]
    on = torch.from_numpy(labels.astype(bool))
    if on.all() or not on.any():
        raise ConfigError("the held-out texts have no contrast of word-start labels to steer by")
    vector = steering_vector(x[on], x[~on])
    norm = float(vector.norm())
    word = torch.tensor([compute.starts_word(p) for p in vocab])
    randoms = compute.random_directions(vector.numel(), config.steer_random, norm, config.seed)
    scales = [f * config.steer_scale for f in SCALE_FRACTIONS]
    sample = held[: config.steer_texts]
    options = {"max_length": config.max_length, "batch_size": config.batch_size}

    def mass(direction: torch.Tensor, scale: float) -> float:
        with intervene(subject, {site: add(direction, scale=scale)}):
            logits = capture(subject, sample, sites="unembed", progress=False, **options)
        return float(compute.word_mass(logits["unembed"], word).mean())

    base = mass(vector, 0.0)
    effect = [0.0] + [mass(vector, s) - base for s in scales[1:]]
    random = [[0.0] + [mass(r, s) - base for s in scales[1:]] for r in randoms]
    gen: dict = {}
    if config.steer_new_tokens > 0:
        gen = _generation_test(subject, site, sample, vector, randoms, scales[-1], word, config)
    return SteeringResult(
        layer, norm, tuple(scales), tuple(effect), tuple(map(tuple, random)), base, len(x), **gen
    )


PROMPT_TOKENS = 12
"""Tokens of each steering text that prompt the generation test (at most)."""
N_EXAMPLES = 3
"""Continuations kept as text in the result."""


def _generation_test(
    subject: Subject,
    site: str,
    texts: list[str],
    vector: torch.Tensor,
    randoms: torch.Tensor,
    scale: float,
    word: torch.Tensor,
    config: ReadoutsConfig,
) -> dict:
    """Greedy continuations unsteered, steered and under each random vector (largest scale)."""
    tok = subject.tokenizer
    prompts = [tok(t, add_special_tokens=True)["input_ids"][:PROMPT_TOKENS] for t in texts]
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: every prompt ends at the last column
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(subject.device), mask.to(subject.device)

    def continuations(direction: torch.Tensor | None) -> torch.Tensor:
        edits = {} if direction is None else {site: add(direction, scale=scale)}
        with intervene(subject, edits), torch.inference_mode():
            out = subject.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=config.steer_new_tokens,
                min_new_tokens=config.steer_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        return out[:, width:].cpu()

    def share(new: torch.Tensor) -> float:
        return float(word[new].double().mean())

    plain = continuations(None)
    steered = continuations(vector)
    base = share(plain)
    random = [share(continuations(r)) - base for r in randoms]
    examples = [
        (tok.decode(p), tok.decode(plain[i]), tok.decode(steered[i]))
        for i, p in enumerate(prompts[:N_EXAMPLES])
    ]
    return {
        "generated": int(config.steer_new_tokens),
        "gen_base": base,
        "gen_effect": share(steered) - base,
        "gen_random": tuple(random),
        "gen_examples": tuple(examples),
    }


def lens_folder(cache_dir: str | os.PathLike[str] | None, key: str) -> Path | None:
    """Where the tuned lens is kept (``None`` without a cache)."""
    return None if cache_dir is None else Path(cache_dir) / key / "tuned-lens"


__all__ = [
    "activations",
    "heatmap",
    "lens_curve",
    "lens_folder",
    "lens_rows",
    "loaded",
    "pieces",
    "probe",
    "steering",
    "texts",
    "tuned_lens",
]
