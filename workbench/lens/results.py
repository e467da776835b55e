""":class:`LensResult`: what a lens read, per layer and position, with aggregates and figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.arrays import finite_list, finite_or_none, frozen_or_none
from workbench.errors import check_figure_kind
from workbench.lens.core import LensError

if TYPE_CHECKING:
    import plotly.graph_objects as go

METRICS = ("kl", "loss", "entropy")
"""Per-layer aggregates :meth:`LensResult.by_layer` and the figures know."""

_PER_LAYER = ("top_probs", "entropy", "kl", "cross_entropy", "target_prob")
_PER_LAYER_INT = ("top_ids", "target_rank")


@dataclass(frozen=True, eq=False)
class LensResult:
    """Next-token distributions read from the residual stream, per layer and position.

    Rows are the selected positions of every text, concatenated in input order (as in
    :class:`workbench.Activations`); ``offsets`` delimits the texts. Layer-indexed arrays have the
    layers of :attr:`layers` on their first axis. All information quantities are in nats.

    Attributes:
        lens: ``"logit"``, ``"last_block"`` or ``"tuned"``.
        model: The model's name.
        revision: Its revision (``None`` for the default one).
        layers: The ``resid_post`` layers read, shape (n_layers,).
        offsets: (n_texts + 1,); text ``i`` is rows ``offsets[i]:offsets[i + 1]``.
        positions: Position of each row in its text, (n_rows,).
        token_ids: Input token at each row, (n_rows,).
        next_ids: The next input token, -1 at a text's last token, (n_rows,).
        tokens: Input tokens as text, (n_rows,).
        top_ids: Top-k token ids, (n_layers, n_rows, k).
        top_probs: Their probabilities, (n_layers, n_rows, k).
        top_tokens: Their text, (n_layers, n_rows, k).
        entropy: Entropy of the lens distribution, (n_layers, n_rows).
        kl: KL(final || lens): from the model's own output distribution, (n_layers, n_rows).
        cross_entropy: -log p_lens(next token); NaN at a text's last token, (n_layers, n_rows).
        final_entropy: Entropy of the model's own output, (n_rows,).
        final_cross_entropy: The model's own next-token loss, NaN at a text's last token.
        target: The named token's id, or ``None``.
        target_token: Its text.
        target_rank: How many tokens the lens ranks strictly above it (0 = top-1).
        target_prob: Its probability under the lens.
        meta: Provenance and settings (model, revision, lens details).
    """

    lens: str
    model: str
    revision: str | None
    layers: np.ndarray
    offsets: np.ndarray = field(repr=False)
    positions: np.ndarray = field(repr=False)
    token_ids: np.ndarray = field(repr=False)
    next_ids: np.ndarray = field(repr=False)
    tokens: np.ndarray = field(repr=False)
    top_ids: np.ndarray = field(repr=False)
    top_probs: np.ndarray = field(repr=False)
    top_tokens: np.ndarray = field(repr=False)
    entropy: np.ndarray = field(repr=False)
    kl: np.ndarray = field(repr=False)
    cross_entropy: np.ndarray = field(repr=False)
    final_entropy: np.ndarray = field(repr=False)
    final_cross_entropy: np.ndarray = field(repr=False)
    target: int | None = None
    target_token: str | None = None
    target_rank: np.ndarray | None = field(default=None, repr=False)
    target_prob: np.ndarray | None = field(default=None, repr=False)
    meta: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        sets = object.__setattr__
        for name in ("layers", "offsets", "positions", "token_ids", "next_ids"):
            sets(self, name, frozen_or_none(getattr(self, name), np.int64))
        for name in _PER_LAYER_INT:
            sets(self, name, frozen_or_none(getattr(self, name), np.int64))
        for name in (*_PER_LAYER, "final_entropy", "final_cross_entropy"):
            sets(self, name, frozen_or_none(getattr(self, name), np.float64))
        for name in ("tokens", "top_tokens"):
            sets(self, name, frozen_or_none(getattr(self, name), np.str_))
        n_layers, n_rows = len(self.layers), int(self.offsets[-1])
        k = self.top_ids.shape[-1] if self.top_ids.ndim == 3 else -1
        expected = {
            "positions": (n_rows,),
            "token_ids": (n_rows,),
            "next_ids": (n_rows,),
            "tokens": (n_rows,),
            "final_entropy": (n_rows,),
            "final_cross_entropy": (n_rows,),
            "top_ids": (n_layers, n_rows, k),
            "top_probs": (n_layers, n_rows, k),
            "top_tokens": (n_layers, n_rows, k),
            "entropy": (n_layers, n_rows),
            "kl": (n_layers, n_rows),
            "cross_entropy": (n_layers, n_rows),
        }
        if self.target is not None:
            expected |= {"target_rank": (n_layers, n_rows), "target_prob": (n_layers, n_rows)}
        elif self.target_rank is not None or self.target_prob is not None:
            raise LensError("target_rank/target_prob given without a target")
        for name, shape in expected.items():
            got = getattr(self, name).shape
            if got != shape:
                raise LensError(f"LensResult.{name} has shape {got}, expected {shape}")

    @property
    def n_rows(self) -> int:
        """Number of (text, position) rows."""
        return int(self.offsets[-1])

    @property
    def n_texts(self) -> int:
        """Number of texts."""
        return len(self.offsets) - 1

    @property
    def top_k(self) -> int:
        """How many top tokens each cell keeps."""
        return int(self.top_ids.shape[-1])

    def layer_index(self, layer: int) -> int:
        """Row of ``layer`` in the layer-indexed arrays.

        Raises:
            LensError: The layer was not read.
        """
        hits = np.flatnonzero(self.layers == int(layer))
        if not hits.size:
            raise LensError(f"layer {layer} was not read; layers: {self.layers.tolist()}")
        return int(hits[0])

    def text_rows(self, i: int) -> slice:
        """Rows of text ``i``.

        Raises:
            LensError: No such text.
        """
        if not -self.n_texts <= i < self.n_texts:
            raise LensError(f"text {i} out of range; the result holds {self.n_texts} texts")
        i %= self.n_texts
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    def __repr__(self) -> str:
        from workbench.display.results import lens_repr

        return lens_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """HTML card, short text and JSON for notebooks (see :mod:`workbench.display`)."""
        from workbench.display.results import lens_bundle

        return lens_bundle(self, include, exclude)

    def kl_by_layer(self) -> np.ndarray:
        """Mean KL(final || lens) over rows, per layer (n_layers,)."""
        return self.kl.mean(axis=1)

    def loss_by_layer(self) -> np.ndarray:
        """Mean next-token cross-entropy over the rows that have a next token, per layer."""
        has = self.next_ids >= 0
        if not has.any():
            return np.full(len(self.layers), np.nan)
        return self.cross_entropy[:, has].mean(axis=1)

    def entropy_by_layer(self) -> np.ndarray:
        """Mean entropy of the lens distribution over rows, per layer."""
        return self.entropy.mean(axis=1)

    def final_loss(self) -> float:
        """The model's own mean next-token cross-entropy over the same rows."""
        has = self.next_ids >= 0
        return float(self.final_cross_entropy[has].mean()) if has.any() else float("nan")

    def by_layer(self, metric: str) -> np.ndarray:
        """One of :data:`METRICS` per layer.

        Raises:
            LensError: Unknown metric.
        """
        if metric not in METRICS:
            raise LensError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
        return {
            "kl": self.kl_by_layer,
            "loss": self.loss_by_layer,
            "entropy": self.entropy_by_layer,
        }[metric]()

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """Plain Python for ``results.json``.

        Args:
            full: Also every per-row array (enough for :meth:`from_dict`); by default only the
                per-layer aggregates.
        """
        out: dict[str, Any] = {
            "lens": self.lens,
            "model": self.model,
            "revision": self.revision,
            "layers": self.layers.tolist(),
            "n_texts": self.n_texts,
            "n_rows": self.n_rows,
            "kl_by_layer": finite_list(self.kl_by_layer()),
            "loss_by_layer": finite_list(self.loss_by_layer()),
            "entropy_by_layer": finite_list(self.entropy_by_layer()),
            "final_loss": finite_or_none(self.final_loss()),
            "target": self.target,
            "target_token": self.target_token,
        }
        if self.target_rank is not None:
            out["target_rank_by_layer"] = finite_list(self.target_rank.mean(axis=1))
        if full:
            for name in (
                "offsets",
                "positions",
                "token_ids",
                "next_ids",
                "tokens",
                "top_ids",
                "top_tokens",
                *_PER_LAYER,
                "target_rank",
                "final_entropy",
                "final_cross_entropy",
            ):
                value = getattr(self, name)
                out[name] = None if value is None else _tolist(value)
            out["meta"] = self.meta
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LensResult:
        """Rebuilds a result from ``to_dict(full=True)``.

        Raises:
            LensError: The dict lacks the per-row arrays (it came from ``to_dict()``).
        """
        if "top_ids" not in data:
            raise LensError("this dict holds only aggregates; save it with to_dict(full=True)")
        names = [f for f in cls.__dataclass_fields__ if f in data]
        kwargs = {n: data[n] for n in names}
        for name in (*_PER_LAYER, "final_entropy", "final_cross_entropy"):
            if kwargs.get(name) is not None:
                kwargs[name] = np.array(kwargs[name], dtype=np.float64)
        return cls(**kwargs)

    def figure_kinds(self) -> list[str]:
        """The kinds :meth:`figure` draws: the token-by-layer heatmap, the curves by layer."""
        return ["heatmap", "by_layer"]

    def figure(self, kind: str = "heatmap", **options: Any) -> go.Figure:
        """A plotly figure of this result.

        Args:
            kind: ``"heatmap"``: the classic lens picture for one text (layers x positions, the
                top token in each cell, colour = ``color``); options ``text`` (default 0),
                ``color`` (``"prob"``, ``"kl"``, ``"entropy"``, ``"cross_entropy"``,
                ``"target_prob"``). ``"by_layer"``: ``metric`` (``"kl"``, ``"loss"``,
                ``"entropy"``) by layer.
            **options: As above.

        Raises:
            LensError: Unknown kind or option value.
        """
        from workbench.lens import figures

        if check_figure_kind(kind, self.figure_kinds()) == "heatmap":
            return figures.heatmap(self, **options)
        return figures.compare_figure([self], **options)


def _tolist(a: np.ndarray) -> Any:
    if a.dtype.kind == "f":
        return np.where(np.isnan(a), None, a).tolist() if np.isnan(a).any() else a.tolist()
    return a.tolist()
