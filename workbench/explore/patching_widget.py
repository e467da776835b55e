"""The patching explorer: the sites x positions grid; click a cell for its numbers and tokens.

Built from a :class:`~workbench.interventions.PatchingResult`. ``data`` holds the whole grid (the
metric and the fraction recovered per cell, the clean and corrupt tokens); ``kind`` switches the
colour between ``recovered`` and the raw ``metric``; ``selected`` is the clicked cell
(``{"site": i, "position": j}``), synced back to Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import traitlets

from workbench.display import html as H
from workbench.display.bundle import footer, provenance_record
from workbench.display.results import patching_grid, patching_headline
from workbench.explore._base import ExplorerError, esm
from workbench.explore._widget import Explorer


def _clean(a: np.ndarray) -> list:
    return [[None if not np.isfinite(v) else round(float(v), 6) for v in row] for row in a]


class PatchingExplorer(Explorer):
    """The patching grid, coloured by recovered (or metric); click a cell for its details."""

    _esm = esm("patching")
    data = traitlets.Dict().tag(sync=True)
    kind = traitlets.Unicode("recovered").tag(sync=True)
    selected = traitlets.Dict().tag(sync=True)
    """The clicked cell: ``{"site": row index, "position": column index}``."""

    def __init__(self, result: Any) -> None:
        if not hasattr(result, "recovered") or not hasattr(result, "sites"):
            raise ExplorerError(
                f"explore.patching takes a PatchingResult (from activation_patching); "
                f"got {type(result).__name__}"
            )
        self.result = result
        data = {
            "metric": result.metric,
            "clean_metric": float(result.clean_metric),
            "corrupt_metric": float(result.corrupt_metric),
            "sites": list(result.sites),
            "positions": [int(p) for p in result.positions],
            "clean_tokens": list(result.clean_tokens),
            "corrupt_tokens": list(result.corrupt_tokens),
            "scores": _clean(result.scores),
            "recovered": _clean(result.recovered),
            "headline": patching_headline(result),
        }
        super().__init__(data=data)

    def cell(self) -> dict[str, Any]:
        """The selected cell's site, position, tokens, metric and recovered (empty if none)."""
        sel = self.selected
        if not sel:
            return {}
        i, j = sel["site"], sel["position"]
        d = self.data
        return {
            "site": d["sites"][i],
            "position": d["positions"][j],
            "clean_token": d["clean_tokens"][j],
            "corrupt_token": d["corrupt_tokens"][j],
            "metric": d["scores"][i][j],
            "recovered": d["recovered"][i][j],
            "clean_metric": d["clean_metric"],
            "corrupt_metric": d["corrupt_metric"],
        }

    def describe(self) -> str:
        """One line: the grid's size and where patching restores the most."""
        d = self.data
        return (
            f"PatchingExplorer({len(d['sites'])} sites x {len(d['positions'])} positions; "
            f"{d['headline']})"
        )

    def static_html(self) -> str:
        """The twin: the grid with hover texts, as the result's own card draws it."""
        body = H.note(
            f"metric {self.data['metric']}: clean {H.fmt(self.data['clean_metric'])}, corrupt "
            f"{H.fmt(self.data['corrupt_metric'])} · hover a cell for its metric · open with a "
            "live kernel to click cells"
        )
        body += f"<div style='font-weight:600'>{H.esc(self.data['headline'])}</div>"
        body += patching_grid(self.result)
        record = provenance_record(None, None, list(self.result.sites))
        return H.card("patching explorer", f"{len(self.result.sites)} sites", body, footer(record))
