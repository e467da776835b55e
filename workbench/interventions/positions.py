"""Which token positions an edit touches, in one forward pass, batched, padded or cached.

A position is the index of a token in its text, counted from 0 at the text's first real token,
whatever the padding: with left padding, column ``j`` of a row holds token ``j - n_pad``. Every
forward pass inside :func:`~workbench.interventions.intervene` is described by a
:class:`TokenPass`: for each column of the batch, its token position, whether it is a real token
(padding is never edited), and how long each text is so far.

Under :meth:`transformers.GenerationMixin.generate` with the KV cache, the first pass holds the
whole prompt and each later pass holds one new token; the keys and values of earlier positions
come from the cache, computed (and edited) when their pass ran. An edit therefore reaches a
position exactly once, in the pass that computes it.

A position selection (the ``positions=`` argument of the edits) is one of:

* ``"all"``: every real token of every pass (the prompt, then each generated token);
* ``"last"``: the last real token of each text in each pass, so the prompt's last token and then
  every generated token (each is the last one when it is computed). Without the KV cache
  (``use_cache=False``) every pass recomputes the whole text and only its newest token is edited,
  so earlier generated tokens lose their edit: cached and uncached generation then differ. To
  edit the same tokens in both, pass a ``(batch, n)`` mask that is true from each prompt's last
  token on;
* an ``int`` or a sequence of ``int``: those token positions; negative ones count back from the
  text's length as it stands in the pass (``-1`` is the same as ``"last"``);
* a boolean mask, ``(n,)`` for every text or ``(batch, n)`` one row per text: token positions
  ``p < n`` with ``mask[p]`` true (positions past ``n`` are not edited).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from workbench.errors import InterventionError

PositionSpec = Literal["all", "last"] | int | Sequence[int] | Sequence[bool] | Tensor | np.ndarray
"""What ``positions=`` accepts (see the module docstring)."""


@dataclass(frozen=True, eq=False)
class TokenPass:
    """Where the columns of one forward pass sit in their texts.

    Attributes:
        positions: ``(batch, pos)`` token position of each column (meaningless at padding).
        real: ``(batch, pos)`` true at real tokens, false at padding.
        lengths: ``(batch,)`` tokens of each text so far, this pass included.
        past: Tokens already in the KV cache before this pass (0 for an uncached pass).
    """

    positions: Int[Tensor, "batch pos"]
    real: Bool[Tensor, "batch pos"]
    lengths: Int[Tensor, " batch"]
    past: int = 0

    @property
    def shape(self) -> tuple[int, int]:
        """``(batch, pos)``."""
        return (int(self.positions.shape[0]), int(self.positions.shape[1]))

    @property
    def last(self) -> Bool[Tensor, "batch pos"]:
        """True at the last real token of each text, if this pass holds it."""
        return self.real & (self.positions == (self.lengths - 1).unsqueeze(-1))

    def to(self, device: torch.device) -> TokenPass:
        """The same pass with its tensors on ``device``."""
        if self.positions.device == device:
            return self
        return TokenPass(
            self.positions.to(device), self.real.to(device), self.lengths.to(device), self.past
        )

    @classmethod
    def plain(cls, batch: int, width: int, device: torch.device | None = None) -> TokenPass:
        """An uncached, unpadded pass: column ``j`` is token ``j`` of every text."""
        positions = torch.arange(width, device=device).expand(batch, width)
        return cls(
            positions,
            torch.ones(batch, width, dtype=torch.bool, device=device),
            torch.full((batch,), width, device=device),
        )

    @classmethod
    def from_call(cls, args: tuple, kwargs: dict[str, Any]) -> TokenPass | None:
        """Reads the pass from a model call's arguments (``None`` when no tokens are found).

        Uses ``attention_mask`` (2-D) when given, else ``position_ids``, else the cache length
        (``cache`` or ``past_key_values``), so plain calls, ``capture``'s padded batches and
        ``generate``'s cached steps are all read correctly.
        """
        tokens = kwargs.get("input_ids", args[0] if args else None)
        if tokens is None:
            tokens = kwargs.get("inputs_embeds")
        if not isinstance(tokens, Tensor) or tokens.dim() < 2:
            return None
        batch, width = int(tokens.shape[0]), int(tokens.shape[1])
        device = tokens.device
        past = _cache_length(kwargs)
        mask = kwargs.get("attention_mask")
        if isinstance(mask, Tensor) and mask.dim() == 2 and mask.shape[0] == batch:
            if mask.shape[1] == width and past:
                mask = torch.cat([mask.new_ones(batch, past), mask], dim=1)
            if mask.shape[1] >= width:
                full = mask.to(device).bool()
                counts = full.long().cumsum(-1)
                return cls((counts - 1)[:, -width:], full[:, -width:], counts[:, -1], past or 0)
        ids = kwargs.get("position_ids")
        if isinstance(ids, Tensor) and ids.dim() == 2 and ids.shape[-1] == width:
            positions = ids.to(device).expand(batch, width)
            real = torch.ones(batch, width, dtype=torch.bool, device=device)
            return cls(positions, real, positions.max(-1).values + 1, past or 0)
        plain = cls.plain(batch, width, device)
        if past:
            plain = cls(plain.positions + past, plain.real, plain.lengths + past, past)
        return plain


def _cache_length(kwargs: dict[str, Any]) -> int:
    for key in ("cache", "past_key_values"):
        cache = kwargs.get(key)
        if cache is not None and hasattr(cache, "get_seq_length"):
            return int(cache.get_seq_length())
    return 0


@dataclass(frozen=True, eq=False)
class Positions:
    """A parsed position selection (build it with :meth:`parse`).

    Attributes:
        kind: ``"all"``, ``"last"``, ``"index"`` or ``"mask"``.
        index: Token positions for ``"index"``.
        mask: ``(rows, n)`` boolean mask for ``"mask"``.
    """

    kind: Literal["all", "last", "index", "mask"]
    index: tuple[int, ...] = ()
    mask: Bool[Tensor, "rows n"] | None = None

    @classmethod
    def parse(cls, spec: PositionSpec | Positions) -> Positions:
        """Parses a ``positions=`` argument.

        Raises:
            InterventionError: Anything else than what the module docstring lists.
        """
        if isinstance(spec, Positions):
            return spec
        if isinstance(spec, str):
            if spec in ("all", "last"):
                return cls(spec)
            raise InterventionError(
                f"unknown positions {spec!r}; use 'all', 'last', token indices or a boolean mask"
            )
        if isinstance(spec, bool):
            raise InterventionError(
                "positions=True/False is ambiguous; use 'all', indices or a boolean mask"
            )
        if isinstance(spec, int | np.integer):
            return cls("index", (int(spec),))
        if isinstance(spec, Tensor | np.ndarray) and spec.dtype in (torch.bool, np.bool_):
            return cls._mask(torch.as_tensor(spec))
        if isinstance(spec, Tensor | np.ndarray):
            if spec.ndim > 1:
                raise InterventionError(
                    f"position indices must be 1-D, got shape {tuple(spec.shape)}"
                )
            spec = [int(i) for i in spec.tolist()]
        items = list(spec) if isinstance(spec, Sequence) else None
        if not items:
            raise InterventionError(
                f"positions {spec!r} selects nothing; use 'all', 'last', indices or a mask"
            )
        if all(isinstance(i, bool | np.bool_) for i in items):
            return cls._mask(torch.tensor(items, dtype=torch.bool))
        if not all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in items):
            raise InterventionError(
                f"positions {spec!r} mixes types; give ints (token indices) or bools (a mask)"
            )
        return cls("index", tuple(sorted({int(i) for i in items})))

    @classmethod
    def _mask(cls, mask: Tensor) -> Positions:
        if mask.dim() not in (1, 2) or mask.shape[-1] == 0:
            raise InterventionError(
                f"a positions mask must be (n,) or (batch, n), got shape {tuple(mask.shape)}"
            )
        return cls("mask", mask=mask.reshape(-1, mask.shape[-1]))

    def select(self, tokens: TokenPass) -> Bool[Tensor, "batch pos"]:
        """Which columns of ``tokens`` to edit (never padding).

        Raises:
            InterventionError: A ``(batch, n)`` mask whose batch differs from the pass's.
        """
        if self.kind == "all":
            return tokens.real
        if self.kind == "last":
            return tokens.last
        batch = tokens.shape[0]
        if self.kind == "index":
            chosen = torch.zeros_like(tokens.real)
            for p in self.index:
                target = tokens.lengths + p if p < 0 else torch.full_like(tokens.lengths, p)
                chosen |= tokens.positions == target.unsqueeze(-1)
            return chosen & tokens.real
        mask = self.mask.to(tokens.positions.device)  # type: ignore[union-attr]
        if mask.shape[0] not in (1, batch):
            raise InterventionError(
                f"positions mask has {mask.shape[0]} rows but the forward pass has {batch} texts"
            )
        width = mask.shape[1]
        inside = (tokens.positions >= 0) & (tokens.positions < width)
        picked = mask.expand(batch, width).gather(1, tokens.positions.clamp(0, width - 1))
        return picked & inside & tokens.real

    def describe(self) -> str:
        """A short human-readable form, for reprs and error messages."""
        if self.kind in ("all", "last"):
            return self.kind
        if self.kind == "index":
            return str(list(self.index))
        return f"mask{tuple(self.mask.shape)}"  # type: ignore[union-attr]
