"""What every lens shares: the checks made before any work, row selection, and the statistics.

A lens turns a residual-stream vector into a next-token distribution. Whatever the lens, the
numbers reported per layer and position are the same (:func:`layer_stats`): the top-k tokens and
their probabilities, the entropy, the KL divergence from the model's own final distribution, the
cross-entropy against the next token, and the rank of a token the user names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from workbench.devices import execution_device
from workbench.errors import LensError
from workbench.models.subject import Subject
from workbench.sites import Site

PositionSpec = str | int | Sequence[int]
"""``"all"``, ``"last"``, a position index or a list of them (negative counts from the end)."""

CHUNK_ELEMENTS = 2**24
"""Logits processed at once (rows x vocabulary), which bounds the memory of the statistics."""


@dataclass(frozen=True)
class Request:
    """A validated lens request: everything checked before the first forward pass.

    Attributes:
        layers: Layers to read (``resid_post.L``), sorted.
        positions: The position selection, as given.
        top_k: How many top tokens to keep.
        target: A token id whose rank is reported, or ``None``.
        norm: The ``final_norm`` site (``None`` when the family declares none).
        unembed: The ``unembed`` site.
        vocab_size: Width of the logits.
    """

    layers: tuple[int, ...]
    positions: PositionSpec
    top_k: int
    target: int | None
    norm: Site | None
    unembed: Site
    vocab_size: int


@dataclass(frozen=True)
class Rows:
    """The rows (text positions) a lens reports, picked out of a capture's row layout.

    Attributes:
        index: Row of each selected position in the capture, shape (n_rows,).
        text: Text each row belongs to.
        position: Position of each row in its text.
        token_ids: Token at each row.
        next_ids: The following token of the same text, -1 at a text's last token.
        offsets: (n_texts + 1,); text ``i`` is selected rows ``offsets[i]:offsets[i + 1]``.
    """

    index: np.ndarray
    text: np.ndarray
    position: np.ndarray
    token_ids: np.ndarray
    next_ids: np.ndarray
    offsets: np.ndarray


def lens_sites(subject: Subject) -> tuple[Site | None, Site]:
    """The ``final_norm`` and ``unembed`` sites a lens decodes with.

    Raises:
        LensError: The family declares no ``unembed`` site (encoders such as MiniLM).
    """
    fam = subject.family
    if "unembed" not in fam.sites:
        raise LensError(
            f"model {subject.name!r} ({fam.name} family) has no unembedding: hooks/{fam.name}.toml "
            "declares no 'unembed' site, so a lens cannot decode its residual stream; use a "
            "decoder with an LM head"
        )
    norm = subject.site("final_norm") if "final_norm" in fam.sites else None
    return norm, subject.site("unembed")


def prepare(
    subject: Subject,
    layers: str | int | Sequence[int],
    positions: PositionSpec,
    top_k: int,
    target: str | int | None,
) -> Request:
    """Checks a lens request before any work.

    Raises:
        LensError: No unembedding, a bad ``top_k``, ``positions`` or ``target``.
        SiteError: Unknown layer (from :meth:`Subject.expand`).
    """
    norm, unembed = lens_sites(subject)
    chosen = tuple(s.layer for s in subject.expand("resid_post", layers))
    vocab = int(subject.model.config.vocab_size)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= vocab:
        raise LensError(f"top_k must be an int in 1..{vocab} (the vocabulary), got {top_k!r}")
    check_positions(positions)
    return Request(
        layers=chosen,  # type: ignore[arg-type]
        positions=positions,
        top_k=top_k,
        target=token_id(subject, target, vocab),
        norm=norm,
        unembed=unembed,
        vocab_size=vocab,
    )


def token_id(subject: Subject, target: str | int | None, vocab_size: int) -> int | None:
    """The id of a target token given as an id, a vocabulary entry or a one-token string.

    Raises:
        LensError: An id outside the vocabulary, or a string that is not exactly one token.
    """
    if target is None:
        return None
    if isinstance(target, bool) or not isinstance(target, int | str | np.integer):
        raise LensError(f"target must be a token string or id, got {type(target).__name__}")
    if isinstance(target, int | np.integer):
        if not 0 <= int(target) < vocab_size:
            raise LensError(f"target id {int(target)} is outside the vocabulary [0, {vocab_size})")
        return int(target)
    tok = subject.tokenizer
    vocab = tok.get_vocab()
    if target in vocab and int(vocab[target]) < vocab_size:
        return int(vocab[target])
    ids = tok.encode(target, add_special_tokens=False) if target else []
    if len(ids) != 1 or not 0 <= int(ids[0]) < vocab_size:
        raise LensError(
            f"target {target!r} is not one token of the vocabulary (it encodes to {len(ids)} "
            "tokens); give a single token (mind a leading space) or its id"
        )
    return int(ids[0])


def check_positions(positions: PositionSpec) -> None:
    """Checks the form of a position selection (ranges are checked against the texts later)."""
    if isinstance(positions, str):
        if positions not in ("all", "last"):
            raise LensError(
                f"unknown positions {positions!r}; use 'all', 'last', an index or a list of indices"
            )
        return
    items = [positions] if isinstance(positions, int | np.integer) else positions
    try:
        ok = len(items) > 0 and all(
            isinstance(p, int | np.integer) and not isinstance(p, bool) for p in items
        )
    except TypeError:
        ok = False
    if not ok:
        raise LensError(
            f"unknown positions {positions!r}; use 'all', 'last', an index or a list of indices"
        )


def select_rows(offsets: np.ndarray, token_ids: np.ndarray, positions: PositionSpec) -> Rows:
    """Picks the rows of ``positions`` in every text of a capture's row layout.

    Args:
        offsets: (n_texts + 1,) text boundaries of the capture.
        token_ids: (n_tokens,) tokens of the capture.
        positions: ``"all"``, ``"last"``, an index or a list of indices within each text.

    Raises:
        LensError: A position outside some text.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    token_ids = np.asarray(token_ids, dtype=np.int64)
    index: list[int] = []
    for i in range(len(offsets) - 1):
        n = int(offsets[i + 1] - offsets[i])
        if positions == "all":
            picked = list(range(n))
        elif positions == "last":
            picked = [n - 1]
        else:
            items = [positions] if isinstance(positions, int | np.integer) else positions
            picked = []
            for p in items:
                if not -n <= int(p) < n:
                    raise LensError(f"position {int(p)} is outside text {i}, which has {n} tokens")
                picked.append(int(p) % n)
            picked = sorted(set(picked))
        index += [int(offsets[i]) + p for p in picked]
    return rows_at(offsets, token_ids, np.asarray(index, dtype=np.int64))


def rows_at(offsets: np.ndarray, token_ids: np.ndarray, index: np.ndarray) -> Rows:
    """The :class:`Rows` of explicit capture rows ``index`` (ascending), e.g. a random sample.

    Raises:
        LensError: An index outside the capture, or not strictly ascending.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    token_ids = np.asarray(token_ids, dtype=np.int64)
    index_a = np.asarray(index, dtype=np.int64).reshape(-1)
    n_rows = int(offsets[-1])
    if len(index_a) and (index_a.min() < 0 or index_a.max() >= n_rows):
        raise LensError(f"row indices must lie in [0, {n_rows}) (the capture's rows)")
    if np.any(np.diff(index_a) <= 0):
        raise LensError("row indices must be strictly ascending")
    text_a = np.searchsorted(offsets, index_a, side="right") - 1
    pos = index_a - offsets[text_a]
    ends = offsets[1:][text_a]
    has_next = index_a + 1 < ends
    next_ids = np.where(has_next, token_ids[np.minimum(index_a + 1, len(token_ids) - 1)], -1)
    counts = np.bincount(text_a, minlength=len(offsets) - 1)
    return Rows(
        index=index_a,
        text=text_a.astype(np.int64),
        position=pos.astype(np.int64),
        token_ids=token_ids[index_a],
        next_ids=next_ids.astype(np.int64),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )


def decode(
    subject: Subject, norm: Site | None, unembed: Site, h: Float[Tensor, "row d"]
) -> Float[Tensor, "row vocab"]:
    """Logits of residual vectors through the model's own final norm and unembedding.

    The modules named by the family's ``final_norm`` and ``unembed`` sites are *called* on ``h``
    (in the model's dtype, on the device the first of them computes on); the logits come back as
    float32. Calling the modules, never multiplying by their weights, is what makes a placed
    model work: a head on another device, or offloaded to disk (its weights on ``meta`` outside
    its own forward), is run by accelerate's hooks like any other block.
    """
    first = norm.module if norm is not None else unembed.module
    x = h.to(device=execution_device(first, subject.device), dtype=subject.dtype)
    if norm is not None:
        x = norm.module(x)
    return unembed.module(x).float()


def layer_stats(
    logits: Float[Tensor, "row vocab"],
    final_logp: Float[Tensor, "row vocab"],
    next_ids: Int[Tensor, " row"],
    top_k: int,
    target: int | None,
) -> dict[str, Tensor]:
    """The per-position numbers of one layer, computed in float64.

    Args:
        logits: The lens's logits.
        final_logp: The model's final log-probabilities at the same positions.
        next_ids: Next token of each position, -1 where there is none.
        top_k: Top tokens to keep.
        target: Token whose rank and probability are reported, or ``None``.

    Returns:
        ``top_ids``, ``top_probs`` (row, k); ``entropy``, ``kl`` (KL(final || lens)) and
        ``cross_entropy`` (NaN without a next token), all in nats; with a target, ``target_rank``
        (how many tokens are strictly more likely; 0 = top-1) and ``target_prob``.
    """
    logp = torch.log_softmax(logits.double(), dim=-1)
    p = logp.exp()
    fin = final_logp.double()
    pf = fin.exp()
    zero = torch.zeros((), dtype=torch.float64, device=logp.device)
    top = logp.topk(top_k, dim=-1)
    has_next = next_ids >= 0
    picked = logp.gather(-1, next_ids.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    out = {
        "top_ids": top.indices,
        "top_probs": top.values.exp(),
        "entropy": -torch.where(p > 0, p * logp, zero).sum(-1),
        # KL >= 0; clamped so float rounding of two equal distributions does not read as < 0
        "kl": torch.where(pf > 0, pf * (fin - logp), zero).sum(-1).clamp(min=0.0),
        "cross_entropy": torch.where(has_next, -picked, torch.full_like(picked, float("nan"))),
    }
    if target is not None:
        t = logp[:, target : target + 1]
        out["target_rank"] = (logp > t).sum(-1)
        out["target_prob"] = t.squeeze(-1).exp()
    return out


def chunks(n_rows: int, vocab_size: int) -> list[slice]:
    """Row slices small enough that one chunk of logits stays under :data:`CHUNK_ELEMENTS`."""
    step = max(1, CHUNK_ELEMENTS // max(vocab_size, 1))
    return [slice(s, min(s + step, n_rows)) for s in range(0, n_rows, step)]


LogitsFn = Callable[[slice], Tensor]
"""Returns a lens's logits for a slice of the selected rows."""


def collect_stats(
    request: Request,
    rows: Rows,
    final_logits: Float[Tensor, "row vocab"],
    layer_logits: Callable[[int], LogitsFn],
) -> dict[str, Any]:
    """Runs :func:`layer_stats` over every requested layer, in bounded chunks of rows.

    Args:
        request: The validated request.
        rows: The selected rows.
        final_logits: The model's own logits at the selected rows.
        layer_logits: ``layer -> (slice -> logits)``; called once per layer, in order.

    Returns:
        Per-layer stacked numpy arrays keyed as in :func:`layer_stats`, plus
        ``final_entropy`` and ``final_cross_entropy`` (n_rows,).
    """
    n = len(rows.index)
    next_ids = torch.from_numpy(rows.next_ids)
    slices = chunks(n, request.vocab_size)

    def final_logp(s: slice) -> Tensor:
        # recomputed per layer rather than kept: bounded memory for large vocabularies
        return torch.log_softmax(final_logits[s].double(), dim=-1)

    parts: dict[str, list[list[Tensor]]] = {}
    final: dict[str, list[Tensor]] = {"entropy": [], "cross_entropy": []}
    with torch.inference_mode():
        for s in slices:
            flp = final_logp(s)
            own = layer_stats(flp, flp, next_ids[s].to(flp.device), 1, None)
            final["entropy"].append(own["entropy"].cpu())
            final["cross_entropy"].append(own["cross_entropy"].cpu())
        for layer in request.layers:
            fn = layer_logits(layer)
            per: dict[str, list[Tensor]] = {}
            for s in slices:
                logits = fn(s)
                flp = final_logp(s).to(logits.device)
                stats = layer_stats(
                    logits, flp, next_ids[s].to(logits.device), request.top_k, request.target
                )
                for key, value in stats.items():
                    per.setdefault(key, []).append(value.cpu())
            for key, value in per.items():
                parts.setdefault(key, []).append(value)
    out: dict[str, Any] = {
        key: torch.stack([torch.cat(v) for v in layers]).numpy() for key, layers in parts.items()
    }
    out["final_entropy"] = torch.cat(final["entropy"]).numpy()
    out["final_cross_entropy"] = torch.cat(final["cross_entropy"]).numpy()
    return out
