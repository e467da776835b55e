"""Interactive explorers for notebooks: anywidget widgets, each with a static HTML twin.

* :func:`lens`: tokens across, layers down; switch between the logit, last-block and tuned lens
  (where available); click a cell for its top-k tokens with probabilities.
* :func:`activations`: a 2-D PCA map of token activations with a layer slider; hover a point for
  its token in context; colour by position, token frequency, text or your labels.
* :func:`patching`: the activation-patching grid; click a cell for the metric and the tokens.

Each widget is one ES module (``static/*.js``, no JupyterLab extension to build, nothing fetched
from the network). Its output also carries ``text/html``: a static twin built in Python from the
same data, which viewers without a widget front end show (exported HTML, GitHub, papermill
output). The widgets' traitlets (``selected``, ``layer``, ``hovered``, ...) sync both ways, so
a notebook can read what was clicked.

Example::

    from workbench import explore, load_model

    subject = load_model("tiny-lm")
    explore.lens(subject, ["The return statement leaves the current function call."])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.explore._base import ExplorerError, require_anywidget

__all__ = ["ExplorerError", "activations", "lens", "patching"]


def lens(result_or_subject: Any, texts: Any = None, *, tuned: Any = None, top_k: int = 5) -> Any:
    """The lens explorer.

    Args:
        result_or_subject: A :class:`~workbench.lens.LensResult`, a list of them over the same
            texts (one per lens), or a Subject (then ``texts`` are read with the logit and
            last-block lenses, and with ``tuned`` when given).
        texts: The texts, when a Subject is given.
        tuned: A trained :class:`~workbench.lens.TunedLens` to add (with a Subject).
        top_k: Top tokens per cell, when the lenses are run here.

    Returns:
        A :class:`~workbench.explore.lens_widget.LensExplorer`.
    """
    require_anywidget()
    from workbench.explore.lens_widget import LensExplorer, lens_results

    return LensExplorer(lens_results(result_or_subject, texts, tuned, top_k))


def activations(
    store_or_acts: Any,
    site: str | None = None,
    color_by: str | Sequence[Any] = "position",
    *,
    max_points: int = 2000,
    tokenizer: Any = None,
    seed: int = 0,
) -> Any:
    """The activations explorer.

    Args:
        store_or_acts: :class:`~workbench.Activations` or an :class:`~workbench.ActivationStore`.
        site: A site kind (``"resid_post"``: every captured layer, on the slider) or a site name
            (``"resid_post.3"``: start at that layer); default: the first captured site's kind.
        color_by: ``"position"`` (in the text), ``"frequency"`` (log10 count of the token in the
            capture), ``"text"``, or labels: one per row or one per text.
        max_points: Rows sampled (seeded) for the map.
        tokenizer: Decodes tokens; default: the capture's model folder's tokenizer.
        seed: Seed of the row sample.

    Returns:
        An :class:`~workbench.explore.activations_widget.ActivationsExplorer`.
    """
    require_anywidget()
    from workbench.explore.activations_widget import ActivationsExplorer, explorer_data

    data, start = explorer_data(
        store_or_acts,
        site=site,
        color_by=color_by,
        max_points=max_points,
        tokenizer=tokenizer,
        seed=seed,
    )
    return ActivationsExplorer(data, start)


def patching(result: Any) -> Any:
    """The patching explorer of a :class:`~workbench.interventions.PatchingResult`."""
    require_anywidget()
    from workbench.explore.patching_widget import PatchingExplorer

    return PatchingExplorer(result)
