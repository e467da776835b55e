"""Run a model's blocks in another order: layer reversal and shuffling as a context manager.

If the middle layers of a residual network make similar small updates that add up like an
ensemble, the order in which they run matters little: reversing or shuffling them costs far less
loss than removing them (Gromov et al., 2024, arXiv 2403.17887; Lad et al., 2024, "The Remarkable
Robustness of LLMs: Stages of Inference?", arXiv 2406.19384; Liu et al., 2026, arXiv 2602.05970).
If each layer builds on the previous one's output (composition), reordering breaks the model.

:func:`reorder_layers` permutes the entries of the block list that the family's hook file names
(``layers = "h"`` for GPT-2, ``"layers"`` for Llama, ...), so it needs no per-architecture code.
The original order is put back when the block exits, also on an exception. Inside the block,
position ``i`` of the list runs the block that was at ``order[i]``; every forward pass (plain,
:func:`~workbench.capture`, lenses, :func:`~workbench.interventions.intervene`) sees the new
order, and a site name such as ``resid_post.3`` names *position* 3 of the new order when it is
resolved inside the block. Each block keeps its own weights and its own cache slot
(``layer_idx``), so cached generation stays consistent.

Example::

    from workbench.interventions import reorder_layers

    middle = list(range(1, subject.n_layers - 1))
    with reorder_layers(subject, [0, *reversed(middle), subject.n_layers - 1]):
        logits = subject.model(input_ids=ids).logits
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
from torch import nn

from workbench.errors import InterventionError
from workbench.models.subject import Subject


def block_list(subject: Subject) -> nn.ModuleList:
    """The model's list of blocks, as the family's hook file names it (``layers = ...``).

    Raises:
        InterventionError: The path does not lead to a ``ModuleList``.
    """
    path = subject.family.layers
    try:
        blocks = subject.model.base_model.get_submodule(path) if path else None
    except AttributeError:
        blocks = None
    if not isinstance(blocks, nn.ModuleList):
        raise InterventionError(
            f"the {subject.family.name} hook file's layers = {path!r} is not a list of blocks on "
            f"{type(subject.model).__name__}; cannot reorder its layers"
        )
    return blocks


def check_order(order: Sequence[int], n_layers: int) -> list[int]:
    """``order`` as a list of ints, checked to be a permutation of ``range(n_layers)``.

    Raises:
        InterventionError: Not a permutation of the model's layers.
    """
    if isinstance(order, np.ndarray):
        order = order.tolist()
    is_index = lambda i: isinstance(i, int | np.integer) and not isinstance(i, bool)  # noqa: E731
    seq = isinstance(order, Sequence) and not isinstance(order, str | bytes)
    items = [int(i) for i in order if is_index(i)] if seq else []
    ok = seq and len(items) == len(order)
    if not ok or sorted(items) != list(range(n_layers)):
        raise InterventionError(
            f"layer order {order!r} is not a "
            f"permutation of the model's {n_layers} layers 0..{n_layers - 1}"
        )
    return items


@contextlib.contextmanager
def reorder_layers(subject: Subject, order: Sequence[int]) -> Iterator[list[int]]:
    """Runs the blocks in ``order`` inside the ``with`` block; restores the original order after.

    Args:
        subject: The model.
        order: A permutation of ``range(subject.n_layers)``: position ``i`` runs block
            ``order[i]`` (``list(range(n))`` changes nothing).

    Yields:
        The order, as a list of ints.

    Raises:
        InterventionError: ``order`` is not a permutation of the model's layers, or the family's
            ``layers`` path is not a list of blocks. Raised before anything is changed.
    """
    blocks = block_list(subject)
    items = check_order(order, len(blocks))
    original = list(blocks)
    try:
        for position, source in enumerate(items):
            blocks[position] = original[source]
        yield items
    finally:
        for position, module in enumerate(original):
            blocks[position] = module
