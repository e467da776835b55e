"""The lens explorer: tokens across, layers down, a lens switcher, click a cell for its top-k.

Built from one or more :class:`~workbench.lens.LensResult` over the same texts (or from a
Subject and texts, running the logit and last-block lenses, and the tuned lens when one is
given). The widget's ``data`` holds, per lens, every layer's top-k tokens and probabilities for
the first :data:`MAX_ROWS` positions; ``lens``, ``text`` and ``selected`` (the clicked cell) are
synced both ways, so a notebook can read what the user clicked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets

from workbench.display import html as H
from workbench.display.bundle import footer, provenance_record
from workbench.display.results import lens_table
from workbench.explore._base import ExplorerError, esm
from workbench.explore._widget import Explorer

MAX_ROWS = 256
"""Positions (over all texts, whole texts first) embedded in the widget."""
MAX_K = 10
"""Top tokens per cell embedded in the widget."""


def lens_results(source: Any, texts: Any = None, tuned: Any = None, top_k: int = 5) -> list:
    """The lens results to explore: given ones, or the lenses run on ``texts``."""
    from workbench.lens import LensResult

    if isinstance(source, LensResult):
        return [source]
    if isinstance(source, Sequence) and source and all(isinstance(r, LensResult) for r in source):
        return list(source)
    if hasattr(source, "model") and hasattr(source, "tokenizer"):
        if texts is None:
            raise ExplorerError("explore.lens(subject, texts): give the texts to read")
        from workbench.lens import last_block_lens, logit_lens

        results = [logit_lens(source, texts, top_k=top_k)]
        results.append(last_block_lens(source, texts, top_k=top_k))
        if tuned is not None:
            results.append(tuned.apply(source, texts, top_k=top_k))
        return results
    raise ExplorerError(
        f"explore.lens takes a LensResult, a list of them, or a Subject and texts; "
        f"got {type(source).__name__}"
    )


def _rows_kept(offsets: np.ndarray) -> tuple[int, int]:
    """(texts, rows) kept: whole texts while they fit in MAX_ROWS (at least part of the first)."""
    n_texts = len(offsets) - 1
    kept = 0
    while kept < n_texts and offsets[kept + 1] <= MAX_ROWS:
        kept += 1
    if kept == 0:
        return 1, min(int(offsets[1]), MAX_ROWS)
    return kept, int(offsets[kept])


def explorer_data(results: Sequence[Any]) -> dict[str, Any]:
    """What the widget draws (JSON): tokens, layers and per-lens top-k per cell."""
    first = results[0]
    for other in results[1:]:
        if other.n_rows != first.n_rows or list(other.tokens) != list(first.tokens):
            raise ExplorerError(
                f"the {other.lens} lens read other positions than the {first.lens} lens; "
                "explore results of the same texts"
            )
    n_texts, n_rows = _rows_kept(first.offsets)
    k = min(first.top_k, MAX_K)
    offsets = [int(x) for x in first.offsets[: n_texts + 1]]
    offsets[-1] = min(offsets[-1], n_rows)
    lenses = {}
    for r in results:
        lenses[r.lens] = {
            "layers": [int(x) for x in r.layers],
            "top_tokens": r.top_tokens[:, :n_rows, :k].tolist(),
            "top_probs": np.round(r.top_probs[:, :n_rows, :k], 4).tolist(),
            "kl": np.round(r.kl[:, :n_rows], 4).tolist(),
            "kl_by_layer": np.round(r.kl_by_layer(), 4).tolist(),
        }
    left = []
    if first.n_texts > n_texts:
        left.append(f"{first.n_texts - n_texts} texts")
    if int(first.offsets[n_texts]) > n_rows:
        left.append(f"{int(first.offsets[n_texts]) - n_rows} positions")
    return {
        "model": first.model,
        "revision": first.revision,
        "tokens": [str(t) for t in first.tokens[:n_rows]],
        "next_ids": [int(x) for x in first.next_ids[:n_rows]],
        "texts": [[offsets[i], offsets[i + 1]] for i in range(n_texts)],
        "k": k,
        "lenses": lenses,
        "note": f"not embedded: {' and '.join(left)}" if left else "",
    }


class LensExplorer(Explorer):
    """Tokens across, layers down; switch lens and text; click a cell for its top-k."""

    _esm = esm("lens")
    data = traitlets.Dict().tag(sync=True)
    lens = traitlets.Unicode("logit").tag(sync=True)
    text = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Dict().tag(sync=True)
    """The clicked cell: ``{"lens": name, "layer": index into layers, "row": position row}``."""

    def __init__(self, results: Sequence[Any]) -> None:
        self._results = {r.lens: r for r in results}
        super().__init__(data=explorer_data(results), lens=results[0].lens)

    @property
    def results(self) -> dict[str, Any]:
        """The lens results shown, by lens name."""
        return dict(self._results)

    def top_k(self) -> list[tuple[str, float]]:
        """The selected cell's top-k tokens and probabilities (empty when nothing is selected)."""
        sel = self.selected
        if not sel:
            return []
        lens = self.data["lenses"][sel["lens"]]
        toks = lens["top_tokens"][sel["layer"]][sel["row"]]
        probs = lens["top_probs"][sel["layer"]][sel["row"]]
        return list(zip(toks, probs, strict=True))

    def describe(self) -> str:
        """One line: model, lenses, texts."""
        d = self.data
        return (
            f"LensExplorer({d['model']}: lenses {', '.join(d['lenses'])}, {len(d['texts'])} "
            f"texts, {len(d['tokens'])} positions)"
        )

    def static_html(self) -> str:
        """The twin: the current lens's table for the current text, with every lens listed."""
        result = self._results[self.lens]
        body = H.note(
            f"lenses: {', '.join(self._results)} · showing {self.lens}, text {self.text} · "
            "open in JupyterLab or VS Code with a live kernel to switch lens and click cells"
        )
        body += lens_table(result, self.text)
        if self.data["note"]:
            body += H.note(self.data["note"])
        record = provenance_record(
            result.model, result.revision, [f"resid_post.{int(x)}" for x in result.layers]
        )
        return H.card("lens explorer", f"{result.model}", body, footer(record))
