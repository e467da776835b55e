"""How a study's result shows itself: the one implementation behind all six result classes.

Each ``workbench/analyses/<name>/results.py`` result class hooks in with two short methods::

    def _repr_mimebundle_(self, include=None, exclude=None):
        return study_bundle(self, "anisotropy", include, exclude)

    def __repr__(self) -> str:
        return study_text(self, "anisotropy")

The card is :func:`~workbench.display.bundle.study_result_bundle`'s: the headline metrics
(``study.metrics(result)``, the ``results.json`` block), the claims table with pass or fail
(``study.claims(result)``), the figure kinds the result can draw, the result's notes, a
provenance footer and, only where static export works here (kaleido and a Chromium), a PNG of
the main figure. The study module is imported when the result is first shown, never when
``results.py`` is imported, so results stay a lower layer than the study that builds them.

A repr must never fail: when the metrics cannot be computed (a hand-built or partial result),
the card says why and the text falls back to the class name and the model.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from typing import Any

from workbench.display import html as H
from workbench.display.bundle import clip_text, mimebundle, study_result_bundle

log = logging.getLogger(__name__)

MAIN_FIGURES = {
    "anisotropy": "by_layer",
    "readouts": "lens_kl",
    "geometric_memory": "spectral_energy",
    "concept_oscillation": "follow_curve",
    "depth_ensemble": "angles_norms",
    "acmas": "f1_by_layer",
}
"""The figure each study's snapshot draws (when the result can draw it)."""


def _study(analysis: str) -> Any:
    return importlib.import_module(f"workbench.analyses.{analysis}.study")


def study_provenance(result: Any) -> dict[str, Any]:
    """Model, revision and sites of a study result, read from whatever fields it has.

    Studies keep these differently (a name, a nested model part, a run record), so this reads
    them by duck typing: ``model`` (a string, or an object with ``model`` and ``revision``),
    ``revision`` or the last checkpoint's, and the measured site kind with its layers.
    """
    record: dict[str, Any] = {}
    model = getattr(result, "model", None)
    revision = getattr(result, "revision", None)
    if model is not None and not isinstance(model, str):  # depth_ensemble: a ModelResult
        revision = getattr(model, "revision", None)
        model = getattr(model, "model", None)
    if model is None and hasattr(result, "toys") and hasattr(result, "scaling"):
        model = "none (toys only)"
    if model is None and hasattr(result, "graph"):  # geometric_memory trains its own model
        graph = result.graph
        model = f"sequence model trained here on {graph.name} ({graph.n_nodes} nodes)"
    final = getattr(result, "final", None)
    if revision is None and final is not None:
        revision = getattr(final, "revision", None)
    record["model"] = model
    record["revision"] = revision
    site, layers = getattr(result, "site", None), getattr(result, "layers", None)
    if isinstance(site, str) and isinstance(layers, list | tuple):
        record["sites"] = [f"{site}.{int(x)}" for x in layers]
    lens = getattr(result, "lens", None)
    if isinstance(lens, str):
        record["lens"] = lens
    return record


_MEMO = "_workbench_display_parts"


def _parts(result: Any, analysis: str) -> tuple[dict[str, Any], Any, list[str]]:
    """Metrics, claims and figure kinds, computed once per result object.

    Some studies' metrics take a while (bootstrap intervals), and a notebook may show a result
    several times; the result is frozen, so what it shows cannot change. The memo lives in the
    instance's ``__dict__`` (not a dataclass field: ``to_dict``, equality and the cache ignore it).
    """
    memo = getattr(result, "__dict__", {}).get(_MEMO)
    if memo is not None:
        return memo
    study = _study(analysis)
    metrics = study.metrics(result)
    if hasattr(study, "CLAIMS"):  # what study.claims(result) does, without a second metrics()
        from workbench.claims import evaluate

        claims = evaluate(study.CLAIMS, metrics)
    else:
        claims = study.claims(result) if hasattr(study, "claims") else None
    kinds = list(result.figure_kinds()) if hasattr(result, "figure_kinds") else []
    parts = (metrics, claims, kinds)
    if hasattr(result, "__dict__"):
        object.__setattr__(result, _MEMO, parts)
    return parts


def study_bundle(
    result: Any,
    analysis: str,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The ``_repr_mimebundle_`` of a study result (see the module docstring).

    Args:
        result: The study's result.
        analysis: The study's name (``workbench.analyses.<analysis>.study`` gives the metrics
            and claims).
        include: MIME types the front end asked for (``None``: all).
        exclude: MIME types it asked to leave out.
    """
    title = type(result).__name__
    try:
        metrics, claims, kinds = _parts(result, analysis)
    except Exception as exc:  # a repr never raises
        log.debug("no metrics for %s: %s", title, exc)
        text = _fallback_text(result, analysis, exc)
        html = H.card(
            f"{analysis} result", title, H.note(f"metrics could not be computed: {exc}"), ""
        )
        return mimebundle(html=html, text=text, include=include, exclude=exclude)
    main = MAIN_FIGURES.get(analysis)
    notes = [str(n) for n in getattr(result, "notes", ()) or ()]
    return study_result_bundle(
        result,
        title=analysis,
        metrics=metrics,
        claims=claims,
        figure_kinds=kinds,
        provenance=study_provenance(result),
        main_figure=main if main in kinds else None,
        notes=[f"note: {n}" for n in notes[:6]]
        + ([f"... {len(notes) - 6} more notes (result.notes)"] if len(notes) > 6 else []),
        include=include,
        exclude=exclude,
    )


def study_text(result: Any, analysis: str) -> str:
    """The ``__repr__`` of a study result: a few lines, never an array."""
    try:
        metrics, claims, kinds = _parts(result, analysis)
    except Exception as exc:  # a repr never raises
        return _fallback_text(result, analysis, exc)
    bundle = study_result_bundle(
        result,
        title=analysis,
        metrics=metrics,
        claims=claims,
        figure_kinds=kinds,
        provenance=study_provenance(result),
        include=("text/plain",),
    )
    return bundle["text/plain"]


def _fallback_text(result: Any, analysis: str, exc: BaseException) -> str:
    model = study_provenance(result).get("model")
    return clip_text(
        [
            f"{type(result).__name__}({analysis}; {model})",
            f"  metrics could not be computed: {type(exc).__name__}: {exc}"[:160],
        ]
    )
