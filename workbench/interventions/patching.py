"""Activation patching sweeps: which site and token carry the information that changes the output.

Run a *clean* prompt and a *corrupt* one of the same token length (e.g. "The Eiffel Tower is
in" vs "The Colosseum is in"). Then, for every site and every token position, run the corrupt
prompt again with that one activation replaced by its clean value, and measure a metric of the
output logits. Where the metric moves back to its clean value, that activation carries what
differs between the prompts (causal tracing, Meng et al., 2022, arXiv 2202.05262; see
Heimersheim & Nanda, 2024, arXiv 2404.15255 and Zhang & Nanda, 2024, arXiv 2309.16042 for how
to choose metrics and corruptions). We report both the raw metric and the fraction recovered,
``(m - m_corrupt) / (m_clean - m_corrupt)``.

The sweep runs one forward pass per site and per chunk of ``batch_size`` positions: row ``i``
of a batch patches position ``i`` only (a boolean ``(batch, n)`` positions mask).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from workbench.arrays import frozen
from workbench.errors import InterventionError, check_figure_kind
from workbench.hooking import read_hooks
from workbench.inputs import tokenize
from workbench.interventions.edits import patch
from workbench.interventions.runtime import intervene
from workbench.models.subject import Subject

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

Metric = Callable[[Float[Tensor, "batch pos vocab"]], Float[Tensor, " batch"]]
"""``metric(logits) -> (batch,)``: one number per row from ``(batch, pos, vocab)`` logits."""


@dataclass(frozen=True)
class LogProb:
    """Log-probability of ``token`` at ``position`` (default: the last one)."""

    token: int
    position: int = -1
    label: str = ""

    def __call__(self, logits: Tensor) -> Tensor:
        """The metric of each batch row, ``(batch,)``."""
        return logits[:, self.position].double().log_softmax(-1)[:, self.token]

    def __str__(self) -> str:
        return f"log p({self.label or self.token})"


@dataclass(frozen=True)
class LogitDiff:
    """``logit[a] - logit[b]`` at ``position`` (default: the last one)."""

    a: int
    b: int
    position: int = -1
    labels: tuple[str, str] = ("", "")

    def __call__(self, logits: Tensor) -> Tensor:
        """The metric of each batch row, ``(batch,)``."""
        row = logits[:, self.position].double()
        return row[:, self.a] - row[:, self.b]

    def __str__(self) -> str:
        return f"logit({self.labels[0] or self.a}) - logit({self.labels[1] or self.b})"


def logit_diff(
    a: int | str, b: int | str, *, tokenizer: Any = None, position: int = -1
) -> LogitDiff:
    """A metric: the logit difference between two tokens at one position.

    Args:
        a: Token id, or a string that the tokenizer encodes as one token (e.g. ``" Paris"``).
        b: The other token.
        tokenizer: Needed for string tokens.
        position: Position in the sequence (default: the last one).
    """
    ids = [_token_id(t, tokenizer) for t in (a, b)]
    return LogitDiff(ids[0], ids[1], position, (repr(a), repr(b)))


def _token_id(token: int | str, tokenizer: Any) -> int:
    if isinstance(token, int):
        return token
    if tokenizer is None:
        raise InterventionError(f"token {token!r} is a string; pass tokenizer= to encode it")
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise InterventionError(f"{token!r} encodes to {len(ids)} tokens {ids}; give one token")
    return int(ids[0])


@dataclass(frozen=True, eq=False)
class PatchingResult:
    """An activation patching sweep: the metric for every (site, position).

    Attributes:
        sites: Patched site names in forward order.
        positions: Patched token positions.
        scores: ``(n_sites, n_positions)`` metric after patching one (site, position).
        clean_metric: The metric of the clean run.
        corrupt_metric: The metric of the corrupt run.
        clean_tokens: The clean prompt's token at each patched position.
        corrupt_tokens: The corrupt prompt's token at each patched position.
        metric: What the metric is.
    """

    sites: tuple[str, ...]
    positions: tuple[int, ...]
    scores: np.ndarray = field(repr=False)
    clean_metric: float
    corrupt_metric: float
    clean_tokens: tuple[str, ...] = field(repr=False)
    corrupt_tokens: tuple[str, ...] = field(repr=False)
    metric: str = ""

    def __post_init__(self) -> None:
        scores = frozen(self.scores)
        object.__setattr__(self, "scores", scores)
        shape = (len(self.sites), len(self.positions))
        if scores.shape != shape:
            raise ValueError(f"scores have shape {scores.shape}, expected {shape}")
        for name in ("clean_tokens", "corrupt_tokens"):
            if len(getattr(self, name)) != len(self.positions):
                raise ValueError(
                    f"{name} has {len(getattr(self, name))} entries, expected {shape[1]}"
                )

    @property
    def recovered(self) -> np.ndarray:
        """``(scores - corrupt) / (clean - corrupt)``: 1 where the clean metric is restored.

        All NaN when the clean and corrupt metrics are equal.
        """
        gap = self.clean_metric - self.corrupt_metric
        if gap == 0:
            return np.full_like(self.scores, np.nan)
        return (self.scores - self.corrupt_metric) / gap

    def __repr__(self) -> str:
        from workbench.display.results import patching_repr

        return patching_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """HTML card, short text and JSON for notebooks (see :mod:`workbench.display`)."""
        from workbench.display.results import patching_bundle

        return patching_bundle(self, include, exclude)

    @property
    def table(self) -> pd.DataFrame:
        """A tidy table, one row per (site, position), sites in forward order."""
        import pandas as pd

        rows = []
        recovered = self.recovered
        for i, site in enumerate(self.sites):
            kind, _, layer = site.partition(".")
            for j, position in enumerate(self.positions):
                rows.append(
                    {
                        "site": site,
                        "kind": kind,
                        "layer": int(layer) if layer else pd.NA,
                        "position": position,
                        "clean_token": self.clean_tokens[j],
                        "corrupt_token": self.corrupt_tokens[j],
                        "metric": float(self.scores[i, j]),
                        "recovered": float(recovered[i, j]),
                    }
                )
        frame = pd.DataFrame(rows)
        frame["layer"] = frame["layer"].astype("Int64")
        return frame

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for ``results.json`` (NaN written as ``None``)."""

        def clean(a: np.ndarray) -> list:
            return [[None if np.isnan(v) else float(v) for v in row] for row in a]

        return {
            "metric": self.metric,
            "clean_metric": self.clean_metric,
            "corrupt_metric": self.corrupt_metric,
            "sites": list(self.sites),
            "positions": list(self.positions),
            "clean_tokens": list(self.clean_tokens),
            "corrupt_tokens": list(self.corrupt_tokens),
            "scores": clean(self.scores),
            "recovered": clean(self.recovered),
        }

    def figure_kinds(self) -> list[str]:
        """The kinds :meth:`figure` draws: recovered fraction, or the raw metric, per cell."""
        return ["recovered", "metric"]

    def figure(self, kind: Literal["recovered", "metric"] = "recovered") -> go.Figure:
        """Heatmap, sites (rows, first layer on top) by positions (columns, labelled by token).

        Args:
            kind: ``"recovered"`` (fraction of the clean metric restored) or ``"metric"``.
        """
        import plotly.graph_objects as go

        from workbench.figures import TWO_COLUMN, style

        check_figure_kind(kind, self.figure_kinds())
        values = self.recovered if kind == "recovered" else self.scores
        labels = [
            f"{p} {c!r}" if c == k else f"{p} {c!r}/{k!r}"
            for p, c, k in zip(self.positions, self.clean_tokens, self.corrupt_tokens, strict=True)
        ]
        heat = go.Heatmap(
            z=values,
            x=labels,
            y=list(self.sites),
            colorscale="RdBu",
            zmid=0.0 if kind == "recovered" else None,
            colorbar={"title": {"text": "recovered" if kind == "recovered" else "metric"}},
        )
        fig = go.Figure(heat)
        fig.update_layout(xaxis_title="position (clean/corrupt token)", yaxis_title="patched site")
        fig.update_yaxes(autorange="reversed")
        height = max(300, 40 + 22 * len(self.sites))
        title = f"Activation patching: {self.metric}" if self.metric else "Activation patching"
        return style(fig, title=title, width=TWO_COLUMN, height=height)


def activation_patching(
    subject: Subject,
    clean: str | Sequence[int] | Tensor,
    corrupt: str | Sequence[int] | Tensor,
    sites: str | Sequence[str] = "resid_post",
    metric: Metric | None = None,
    *,
    positions: Literal["all"] | Sequence[int] = "all",
    layers: str | int | Sequence[int] = "all",
    batch_size: int = 16,
    progress: bool = True,
) -> PatchingResult:
    """Patches the clean run into the corrupt run at each site and position, one at a time.

    Args:
        subject: A causal LM (its output has ``logits``).
        clean: The clean prompt: a text or its token ids.
        corrupt: The corrupt prompt, with as many tokens as ``clean``.
        sites: Site kinds or names, as for :func:`~workbench.capturing` (``"resid_post"``:
            every layer).
        metric: ``metric(logits) -> (batch,)`` on ``(batch, pos, vocab)`` logits. Default: the
            log-probability, at the last position, of the clean run's top next token
            (:class:`LogProb`); :func:`logit_diff` is the usual alternative.
        positions: ``"all"`` or a list of token positions (negative counts from the end).
        layers: Layer selection for bare site kinds.
        batch_size: Positions patched per forward pass.
        progress: Show a progress bar over sites.

    Returns:
        A :class:`PatchingResult`; ``.table`` is the tidy table, ``.figure()`` the heatmap.

    Raises:
        InterventionError: Prompts of different token counts, bad positions, a model
            without logits, or a metric that does not return one number per row.
        SiteError: An unknown site or layer.
    """
    if batch_size < 1:
        raise InterventionError(f"batch_size must be at least 1, got {batch_size}")
    resolved = subject.expand(sites, layers)
    ids_clean = _prompt(subject, clean, "clean")
    ids_corrupt = _prompt(subject, corrupt, "corrupt")
    n = len(ids_clean)
    if len(ids_corrupt) != n:
        raise InterventionError(
            f"clean prompt has {n} tokens but corrupt has {len(ids_corrupt)}; patching needs "
            "prompts of equal token length"
        )
    chosen = _positions(positions, n)
    device = subject.device
    ids_clean, ids_corrupt = ids_clean.to(device)[None], ids_corrupt.to(device)[None]
    values: dict[str, Tensor] = {}

    def keep(site: Any, tensor: Tensor) -> None:
        values[site.name] = tensor[0].detach().clone()

    with torch.inference_mode():
        with read_hooks(resolved, keep):
            clean_logits = _logits(subject, ids_clean)
        corrupt_logits = _logits(subject, ids_corrupt)
        if metric is None:
            top = int(clean_logits[0, -1].argmax())
            metric = LogProb(top, -1, repr(subject.tokenizer.decode([top])))
        m_clean = _evaluate(metric, clean_logits, 1)[0]
        m_corrupt = _evaluate(metric, corrupt_logits, 1)[0]
        scores = np.empty((len(resolved), len(chosen)))
        for i, site in enumerate(
            tqdm(resolved, desc="patching", unit="site", disable=not progress)
        ):
            for start in range(0, len(chosen), batch_size):
                chunk = chosen[start : start + batch_size]
                mask = torch.zeros(len(chunk), n, dtype=torch.bool)
                mask[torch.arange(len(chunk)), torch.tensor(chunk)] = True
                with intervene(subject, {site.name: patch(values[site.name], positions=mask)}):
                    logits = _logits(subject, ids_corrupt.expand(len(chunk), n))
                scores[i, start : start + len(chunk)] = _evaluate(metric, logits, len(chunk))
    decode = subject.tokenizer.decode
    return PatchingResult(
        sites=tuple(s.name for s in resolved),
        positions=tuple(chosen),
        scores=scores,
        clean_metric=float(m_clean),
        corrupt_metric=float(m_corrupt),
        clean_tokens=tuple(decode([int(ids_clean[0, p])]) for p in chosen),
        corrupt_tokens=tuple(decode([int(ids_corrupt[0, p])]) for p in chosen),
        metric=str(metric) if isinstance(metric, LogProb | LogitDiff) else _name(metric),
    )


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _prompt(subject: Subject, prompt: Any, what: str) -> Tensor:
    if isinstance(prompt, str):
        items: Any = [prompt]
    elif isinstance(prompt, Tensor):
        items = prompt.reshape(1, -1) if prompt.dim() == 1 else prompt
    else:
        items = [list(prompt)]
    config = subject.model.config
    context = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", 0)
    toks = tokenize(
        subject.tokenizer,
        items,
        max_length=int(context or 512),
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
    )
    if len(toks.sequences) != 1:
        raise InterventionError(f"the {what} prompt must be one text, got {len(toks.sequences)}")
    return torch.as_tensor(toks.sequences[0], dtype=torch.long)


def _positions(positions: Any, n: int) -> list[int]:
    if isinstance(positions, str):
        if positions != "all":
            raise InterventionError(f"unknown positions {positions!r}; use 'all' or a list of ints")
        return list(range(n))
    chosen = []
    for p in [positions] if isinstance(positions, int) else list(positions):
        if isinstance(p, bool) or not isinstance(p, int | np.integer) or not -n <= p < n:
            raise InterventionError(
                f"position {p!r} is out of range for a {n}-token prompt (use -{n}..{n - 1})"
            )
        chosen.append(int(p) % n)
    if not chosen:
        raise InterventionError("positions is empty; use 'all' or a list of ints")
    return sorted(set(chosen))


def _logits(subject: Subject, ids: Tensor) -> Tensor:
    model = subject.model
    kwargs: dict[str, Any] = {"input_ids": ids}
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs["use_cache"] = False
    out = model(**kwargs)
    logits = getattr(out, "logits", None)
    if logits is None:
        raise InterventionError(
            f"{type(model).__name__} returns no logits; activation patching needs a language "
            "model head"
        )
    return logits


def _evaluate(metric: Metric, logits: Tensor, batch: int) -> np.ndarray:
    value = metric(logits)
    value = torch.as_tensor(value)
    if value.shape != (batch,):
        raise InterventionError(
            f"metric returned shape {tuple(value.shape)} for {batch} rows; it must return one "
            "number per row, shape (batch,)"
        )
    return value.detach().double().cpu().numpy()
