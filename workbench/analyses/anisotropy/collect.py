"""The only part of the anisotropy study that touches models: load, capture, take gradients, free.

Each function gets a loaded :class:`~workbench.Subject` (from :func:`loaded`, which frees it on
exit) and returns plain arrays for :mod:`~workbench.analyses.anisotropy.compute`. Activations are
read with :func:`workbench.capturing` and gradients with :func:`workbench.hooking.read_hooks` on the
same resolved site, so an input site (``resid_pre``, ``resid_mid``) gives the block's input in
both, never its output.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from workbench.analyses.anisotropy.compute import step_of
from workbench.analyses.anisotropy.config import AnisotropyConfig
from workbench.capturing import capture
from workbench.errors import ConfigError
from workbench.hooking import pad, read_hooks
from workbench.inputs import read_texts, tokenize
from workbench.models import Subject, load_model, local_checkpoints, quiet_transformers
from workbench.models.tiny_lm import ensure_tiny_lm


def resolve_checkpoints(model: str, checkpoints: str) -> list[str | None]:
    """Turns the ``checkpoints`` parameter into revisions, in training order.

    Raises:
        ConfigError: ``all`` for a model whose checkpoint list cannot be read offline.
    """
    spec = str(checkpoints).strip()
    if spec == "none":
        return [None]
    if spec != "all":
        revisions = [r.strip() for r in spec.split(",") if r.strip()]
        return sorted(revisions, key=lambda r: (step_of(r) is None, step_of(r) or 0))
    folder = ensure_tiny_lm() if model == "tiny-lm" else Path(model).expanduser()
    found = local_checkpoints(folder)
    if not found:
        raise ConfigError(
            f"checkpoints='all' needs a folder of step-N checkpoints; {model!r} has none. "
            "Give a comma list of revisions (e.g. step1000,step8000) or 'none'"
        )
    return list(found)


@contextlib.contextmanager
def loaded(config: AnisotropyConfig, revision: str | None) -> Iterator[Subject]:
    """Loads one checkpoint for the block and frees it afterwards (one model in memory)."""
    quiet_transformers()
    subject = load_model(config.model, revision=revision, device=config.device)
    try:
        yield subject
    finally:
        device = subject.device
        del subject
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def texts(config: AnisotropyConfig) -> list[str]:
    """The texts the study captures."""
    return read_texts(config.text_source, config.n_texts)


def token_counts(subject: Subject, config: AnisotropyConfig) -> np.ndarray:
    """Corpus count of every token id over the first ``freq_texts`` texts of the source.

    The texts are tokenized whole (no ``max_length``): these are frequencies, not inputs.
    """
    corpus = read_texts(config.text_source, max(config.freq_texts, config.n_texts))
    vocab = int(subject.model.get_input_embeddings().num_embeddings)
    counts = np.zeros(vocab, dtype=np.int64)
    for ids in subject.tokenizer(corpus, add_special_tokens=False)["input_ids"]:
        counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=vocab)[:vocab]
    return counts


def layer_states(
    subject: Subject, inputs: Sequence[str], config: AnisotropyConfig, layers: str | None = None
) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """``config.site`` at each selected layer: ``({layer: (n_tokens, d) float64}, token_ids)``."""
    acts = capture(
        subject,
        list(inputs),
        sites=config.site,
        layers=config.layers if layers is None else layers,
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
    )
    states = {}
    for name in acts.sites:
        states[int(name.rsplit(".", 1)[1])] = acts[name].double().numpy()
    return states, acts.token_ids.numpy()


def embedding_table(subject: Subject) -> np.ndarray:
    """The input embedding table as float64, ``(vocab, d)``."""
    return subject.model.get_input_embeddings().weight.detach().double().cpu().numpy()


def has_lm_head(subject: Subject) -> bool:
    """Whether the model predicts tokens (the tangent test needs a language-model loss)."""
    head = getattr(subject.model, "get_output_embeddings", lambda: None)()
    return head is not None and subject.is_causal


def representation_gradients(
    subject: Subject, inputs: Sequence[str], site: str, config: AnisotropyConfig
) -> np.ndarray:
    """Gradient of the summed next-token loss with respect to one site's tensor: ``(d, n_tokens)``.

    The loss is summed over real tokens (not averaged per batch), so each token's gradient does
    not depend on how the texts were batched. The tensor is the one the site names (a block's
    input for input sites), read through the same hooks as :func:`workbench.capturing`; padded
    positions are dropped and rows follow the capture's order (every real token, text by text).
    """
    target = subject.site(site)
    toks = tokenize(
        subject.tokenizer,
        list(inputs),
        max_length=config.max_length,
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
    )
    pad_id = subject.tokenizer.pad_token_id or 0
    kept: dict[str, torch.Tensor] = {}

    def keep(_site, tensor: torch.Tensor) -> None:
        tensor.retain_grad()
        kept["h"] = tensor

    grads = []
    model = subject.model
    try:
        with read_hooks([target], keep):
            for start in range(0, len(toks.sequences), config.batch_size):
                seqs = list(toks.sequences[start : start + config.batch_size])
                ids, mask = pad(seqs, pad_id, "right")
                ids, mask = ids.to(subject.device), mask.to(subject.device)
                model.zero_grad(set_to_none=True)
                logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
                labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
                loss = F.cross_entropy(
                    logits[:, :-1].flatten(0, 1).float(),
                    labels.flatten(),
                    ignore_index=-100,
                    reduction="sum",
                )
                loss.backward()
                grads.append(kept.pop("h").grad[mask.bool()].detach().double().cpu())
    finally:
        model.zero_grad(set_to_none=True)
    return torch.cat(grads).numpy().T
