"""The only part of the study that touches a language model: load, capture, lens, skip, free.

Everything goes through the workbench's own layers, with no per-architecture code:

* the residual stream ``h_0 = resid_pre.0`` and ``h_{l+1} = resid_post.l`` through
  :func:`workbench.capture`;
* per-layer loss through :func:`workbench.lens.logit_lens` and a :class:`~workbench.lens.TunedLens`
  trained on the next ``n_texts`` texts of the source;
* layer removal through :func:`workbench.interventions.skip` (a contiguous block is several skips:
  each skipped block passes its input on) and reordering of the middle layers through
  :func:`workbench.interventions.reorder_layers`, both inside ``with`` blocks that restore the
  model on exit.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from workbench import capture
from workbench.analyses.depth_ensemble.compute import early_exit_fraction, exit_layers
from workbench.analyses.depth_ensemble.config import DepthEnsembleConfig
from workbench.analyses.depth_ensemble.results import LayerSkip, LensLoss
from workbench.errors import SiteError
from workbench.hooking import pad
from workbench.inputs import read_texts, tokenize
from workbench.interventions import intervene, reorder_layers, skip
from workbench.lens import TunedLens, logit_lens
from workbench.models import Subject, load_model, quiet_transformers

Batch = tuple[torch.Tensor, torch.Tensor]


@contextlib.contextmanager
def loaded(config: DepthEnsembleConfig) -> Iterator[Subject]:
    """Loads the model for the block and frees it afterwards."""
    quiet_transformers()
    subject = load_model(config.model, device=config.device)
    try:
        yield subject
    finally:
        device = subject.device
        del subject
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def check_sites(subject: Subject) -> bool:
    """Checks the sites the geometry needs; returns whether the lenses and skipping can run.

    Raises:
        SiteError: The family lacks ``resid_pre`` or ``resid_post`` (one line, naming them), or
            the model has fewer than two layers.
    """
    missing = [k for k in ("resid_pre", "resid_post") if k not in subject.family.sites]
    if missing:
        raise SiteError(
            f"model {subject.name!r} ({subject.family.name} family) lacks the site(s) "
            f"{', '.join(missing)} that the layer geometry needs; add them to "
            f"hooks/{subject.family.name}.toml"
        )
    if subject.n_layers < 2:
        raise SiteError(f"model {subject.name!r} has {subject.n_layers} layer; the study needs 2+")
    return "unembed" in subject.family.sites and subject.is_causal


def texts(config: DepthEnsembleConfig) -> list[str]:
    """The texts measured."""
    return read_texts(config.text_source, config.n_texts)


def lens_texts(config: DepthEnsembleConfig) -> tuple[list[str], bool]:
    """Texts for the tuned lens, and whether they are held out.

    The next ``n_texts`` texts of the source; when the source has no more, the measured texts
    themselves (then ``held_out`` is ``False``).
    """
    more = read_texts(config.text_source, 2 * config.n_texts)[config.n_texts :]
    return (more, True) if more else (texts(config), False)


def states(subject: Subject, inputs: Sequence[str], config: DepthEnsembleConfig) -> np.ndarray:
    """``(n_layers + 1, n_tokens, d)`` float64: ``resid_pre.0``, then ``resid_post.l``."""
    acts = capture(
        subject,
        list(inputs),
        sites=["resid_pre.0", "resid_post"],
        layers="all",
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
    )
    names = ["resid_pre.0"] + [f"resid_post.{i}" for i in range(subject.n_layers)]
    return np.stack([acts[n].double().numpy() for n in names])


def lens_loss(
    subject: Subject,
    inputs: Sequence[str],
    train_inputs: Sequence[str],
    config: DepthEnsembleConfig,
) -> LensLoss:
    """Per-layer loss through the logit lens and a tuned lens, and the early-exit shares."""
    kw = dict(max_length=config.max_length, batch_size=config.batch_size, top_k=1)
    logit = logit_lens(subject, list(inputs), **kw)
    lens = TunedLens.train(
        subject,
        list(train_inputs),
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
        steps=config.lens_steps,
        seed=config.seed,
    )
    tuned = lens.apply(subject, list(inputs), **kw)
    n = subject.n_layers
    final = logit.top_ids[-1, :, 0]  # the last layer's logit lens is the model's own output
    exits = exit_layers(logit.top_ids[:, :, 0], final)
    tuned_exits = exit_layers(tuned.top_ids[:, :, 0], final)
    return LensLoss(
        logit=logit.loss_by_layer(),
        tuned=tuned.loss_by_layer(),
        final_loss=logit.final_loss(),
        exit_counts=np.bincount(exits, minlength=n + 1),
        early_exit_fraction=early_exit_fraction(exits, n),
        early_exit_fraction_tuned=early_exit_fraction(tuned_exits, n),
    )


def batches(subject: Subject, inputs: Sequence[str], config: DepthEnsembleConfig) -> list[Batch]:
    """The texts tokenized and right-padded into ``(input_ids, attention_mask)`` batches."""
    toks = tokenize(
        subject.tokenizer,
        list(inputs),
        max_length=config.max_length,
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
    )
    pad_id = subject.tokenizer.pad_token_id or 0
    out = []
    for start in range(0, len(toks.sequences), config.batch_size):
        out.append(pad(list(toks.sequences[start : start + config.batch_size]), pad_id, "right"))
    return out


@torch.no_grad()
def mean_loss(subject: Subject, data: Sequence[Batch]) -> float:
    """Mean next-token cross-entropy over every real token that has a next one."""
    total, count = 0.0, 0
    for ids, mask in data:
        ids, mask = ids.to(subject.device), mask.to(subject.device)
        logits = subject.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        loss = F.cross_entropy(
            logits[:, :-1].flatten(0, 1).double(),
            labels.flatten(),
            ignore_index=-100,
            reduction="sum",
        )
        total += float(loss)
        count += int((labels != -100).sum())
    return total / max(count, 1)


def block_sizes(n_layers: int) -> list[int]:
    """Sizes of the contiguous blocks removed: 2, 4, 8, ... up to half the layers."""
    sizes, size = [], 2
    while size <= max(2, n_layers // 2) and size < n_layers:
        sizes.append(size)
        size *= 2
    return sizes


def shuffled_orders(middle: Sequence[int], n: int, seed: int) -> list[list[int]]:
    """``n`` random orders of the middle layers, none the original (empty below 2 layers)."""
    middle = list(middle)
    if len(middle) < 2:
        return []
    rng = np.random.default_rng(seed)
    orders = []
    while len(orders) < n:
        order = [int(i) for i in rng.permutation(middle)]
        if order != middle:
            orders.append(order)
    return orders


def layer_skip(subject: Subject, data: Sequence[Batch], config: DepthEnsembleConfig) -> LayerSkip:
    """Loss changes when single layers or contiguous blocks are removed and middle layers reordered.

    The middle layers are all but the first and the last; they are reversed once and shuffled
    ``config.shuffles`` times (seeded).
    """
    n = subject.n_layers
    base = mean_loss(subject, data)

    def without(layers: Sequence[int]) -> float:
        with intervene(subject, {f"resid_post.{i}": skip() for i in layers}):
            return mean_loss(subject, data) - base

    def reordered(middle_order: Sequence[int]) -> float:
        order = [0, *middle_order, n - 1]
        with reorder_layers(subject, order):
            return mean_loss(subject, data) - base

    single = [without([i]) for i in range(n)]
    sizes, starts, deltas = [], [], []
    for size in block_sizes(n):
        for start in range(n - size + 1):
            sizes.append(size)
            starts.append(start)
            deltas.append(without(range(start, start + size)))
    middle = list(range(1, n - 1))
    reverse = reordered(middle[::-1]) if len(middle) >= 2 else float("nan")
    orders = shuffled_orders(middle, config.shuffles, config.seed)
    return LayerSkip(
        baseline=base,
        single=np.array(single),
        block_sizes=np.array(sizes, dtype=np.int64),
        block_starts=np.array(starts, dtype=np.int64),
        block_deltas=np.array(deltas),
        middle=(1, n - 2),
        reverse=reverse,
        shuffle_orders=np.array(orders, dtype=np.int64).reshape(len(orders), len(middle)),
        shuffle_deltas=np.array([reordered(o) for o in orders]),
    )
