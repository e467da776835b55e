"""How a study's result shows itself: the one implementation behind every study's card.

A study result (:class:`~workbench.analyses.base.StudyResult`) shows itself through
:func:`study_bundle` and :func:`study_text`, which read only the protocol: its ``STUDY`` name,
``metrics()`` (the ``results.json`` block, computed once per result), ``claims()`` (the claims
table with pass or fail), ``figure_kinds()`` and ``MAIN_FIGURE``, ``provenance()`` (model,
revision, sites) and ``notes``. The card is :func:`~workbench.display.bundle.study_result_bundle`'s:
the headline metrics, the claims, the figure kinds, the notes, a provenance footer and, only where
static export works here (kaleido and a Chromium), a PNG of the main figure. This module imports no
study: the result brings everything.

A repr must never fail: when the metrics cannot be computed (a hand-built or partial result),
the card says why and the text falls back to the class name and the model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from workbench.display import html as H
from workbench.display.bundle import clip_text, mimebundle, study_result_bundle

log = logging.getLogger(__name__)

NOTES_SHOWN = 6
"""Notes listed on a card before the rest are counted."""


def _parts(result: Any) -> tuple[dict[str, Any], Any, list[str]]:
    return result.metrics(), result.claims(), list(result.figure_kinds())


def _notes(result: Any) -> list[str]:
    notes = [str(n) for n in result.notes]
    shown = [f"note: {n}" for n in notes[:NOTES_SHOWN]]
    if len(notes) > NOTES_SHOWN:
        shown.append(f"... {len(notes) - NOTES_SHOWN} more notes (result.notes)")
    return shown


def study_bundle(
    result: Any, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
) -> dict[str, Any]:
    """The ``_repr_mimebundle_`` of a study result (see the module docstring).

    Args:
        result: The study's result.
        include: MIME types the front end asked for (``None``: all).
        exclude: MIME types it asked to leave out.
    """
    title, analysis = type(result).__name__, result.STUDY
    try:
        metrics, claims, kinds = _parts(result)
    except Exception as exc:  # a repr never raises
        log.debug("no metrics for %s: %s", title, exc)
        text = _fallback_text(result, exc)
        html = H.card(
            f"{analysis} result", title, H.note(f"metrics could not be computed: {exc}"), ""
        )
        return mimebundle(html=html, text=text, include=include, exclude=exclude)
    main = result.MAIN_FIGURE
    return study_result_bundle(
        result,
        title=analysis,
        metrics=metrics,
        claims=claims,
        figure_kinds=kinds,
        provenance=result.provenance(),
        main_figure=main if main in kinds else None,
        notes=_notes(result),
        shortfalls=[s.message() for s in result.shortfalls()],
        include=include,
        exclude=exclude,
    )


def study_text(result: Any) -> str:
    """The ``__repr__`` of a study result: a few lines, never an array."""
    try:
        metrics, claims, kinds = _parts(result)
    except Exception as exc:  # a repr never raises
        return _fallback_text(result, exc)
    bundle = study_result_bundle(
        result,
        title=result.STUDY,
        metrics=metrics,
        claims=claims,
        figure_kinds=kinds,
        provenance=result.provenance(),
        shortfalls=[s.message() for s in result.shortfalls()],
        include=("text/plain",),
    )
    return bundle["text/plain"]


def _fallback_text(result: Any, exc: BaseException) -> str:
    try:
        model = result.provenance().get("model")
    except Exception:  # a repr never raises
        model = "?"
    return clip_text(
        [
            f"{type(result).__name__}({result.STUDY}; {model})",
            f"  metrics could not be computed: {type(exc).__name__}: {exc}"[:160],
        ]
    )
