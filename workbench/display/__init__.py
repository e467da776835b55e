"""How workbench objects show themselves in a notebook and in a terminal.

Every object a user meets (a :class:`~workbench.Subject`, :class:`~workbench.Activations`, an
:class:`~workbench.ActivationStore`, a lens, probe, patching or steering result, a study result)
has a ``_repr_mimebundle_`` built here:

* ``text/html``: a card of plain HTML with inline styles, built from the data: no script, no
  stylesheet, no network, so it reads the same in JupyterLab, VS Code, papermill output, an
  exported HTML page and a sanitized (untrusted) notebook. All text is escaped.
* ``text/plain``: a few lines (at most 12, under 1,000 characters); never a whole tensor.
* ``application/vnd.workbench+json``: the object's small JSON form (see :mod:`.bundle` for why
  not ``application/json``).
* ``image/png``: for results, a snapshot of the main figure, only where kaleido and a Chromium
  can draw it (silently left out otherwise; ``WORKBENCH_SNAPSHOTS=0`` turns it off).

The HTML ends with a provenance footer: model, revision, sites, git commit, the CPU kernel level
and thread count (:func:`workbench.provenance.numerics`). Large data is capped before it is
embedded, with a note of what was left out.

This package imports no workbench class (renderers are duck-typed) and no torch at import, so
any layer may call it from a ``_repr_mimebundle_``.

Example::

    from workbench.display import study_result_bundle    # for a study's result class
"""

from __future__ import annotations

from workbench.display.bundle import (
    JSON_MIME,
    SNAPSHOT_ENV,
    clip_text,
    footer,
    metrics_table,
    mimebundle,
    provenance_record,
    snapshot,
    study_result_bundle,
)

__all__ = [
    "JSON_MIME",
    "SNAPSHOT_ENV",
    "clip_text",
    "footer",
    "metrics_table",
    "mimebundle",
    "provenance_record",
    "snapshot",
    "study_result_bundle",
]
