"""Cross-validation folds and control labels for probe sweeps.

Folds keep each text whole (``groups="text"``): the tokens of one text are strongly correlated, and
a probe tested on tokens of texts it was trained on overstates what it learned. When every unit
(text or row) has one label, folds are stratified by it. Everything is a pure function of the
labels, the layout and an integer seed, so the same call gives the same folds on any machine.

Control tasks (Hewitt & Liang, 2019, "Designing and Interpreting Probes with Control Tasks",
arXiv 1909.03368) give every token *type* a fixed random label, drawn from the empirical label
distribution: a probe can only fit it by memorizing word identities, so the gap between task and
control accuracy (*selectivity*) tells what the representation encodes beyond lexical identity.
A shuffled-label control instead permutes the labels over units, destroying any link between rows
and labels while keeping the class balance.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from workbench.errors import ProbeError

Groups = Literal["text", "row"]


def _rng(random_state: int, seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(random_state), int(seed), stream])


def row_units(n_rows: int, offsets: np.ndarray | None, groups: Groups) -> np.ndarray:
    """The unit (text for ``"text"``, row for ``"row"``) of each row."""
    if groups not in ("text", "row"):
        raise ProbeError(f"unknown groups {groups!r}; use 'text' or 'row'")
    if groups == "row" or offsets is None:
        return np.arange(n_rows)
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


def cv_folds(
    labels: np.ndarray,
    offsets: np.ndarray | None = None,
    *,
    cv: int = 5,
    seed: int = 0,
    groups: Groups = "text",
    random_state: int = 0,
) -> np.ndarray:
    """Assigns each row to one of ``cv`` folds.

    Units (texts, or rows) are shuffled with a generator seeded by ``(random_state, seed)`` and
    dealt round-robin to the folds; when each unit has a single label they are dealt class by
    class (stratified folds).

    Args:
        labels: ``(n_rows,)`` per-row labels.
        offsets: ``(n_texts + 1,)`` text boundaries (``None``: every row is a text).
        cv: Number of folds (at least 2).
        seed: Which repetition of the cross-validation.
        groups: Keep texts whole (``"text"``) or split rows freely (``"row"``).
        random_state: Base seed.

    Returns:
        ``(n_rows,)`` fold index of each row.

    Raises:
        ProbeError: ``cv`` below 2 or above the number of units.
    """
    labels = np.asarray(labels)
    units = row_units(len(labels), offsets, groups)
    n_units = int(units[-1]) + 1 if len(units) else 0
    if not (isinstance(cv, int | np.integer) and 2 <= cv <= n_units):
        raise ProbeError(
            f"cv={cv!r} folds for {n_units} {'texts' if groups == 'text' else 'rows'}; "
            f"use an integer from 2 to {n_units}"
            + (" (or groups='row' to split the rows of texts)" if groups == "text" else "")
        )
    rng = _rng(random_state, seed, 0)
    first = np.searchsorted(units, np.arange(n_units))
    unit_labels = labels[first]
    order = rng.permutation(n_units)
    if np.array_equal(unit_labels[units], labels):  # one label per unit: stratify
        _, codes = np.unique(unit_labels[order], return_inverse=True)
        order = order[np.argsort(codes, kind="stable")]
    unit_fold = np.empty(n_units, dtype=np.int64)
    unit_fold[order] = np.arange(n_units) % cv
    return unit_fold[units]


def shuffled_labels(
    labels: np.ndarray,
    offsets: np.ndarray | None = None,
    *,
    seed: int = 0,
    groups: Groups = "text",
    random_state: int = 0,
) -> np.ndarray:
    """Control labels: the labels permuted over units (texts when each text has one label)."""
    labels = np.asarray(labels)
    units = row_units(len(labels), offsets, groups)
    n_units = int(units[-1]) + 1
    first = np.searchsorted(units, np.arange(n_units))
    rng = _rng(random_state, seed, 1)
    if np.array_equal(labels[first][units], labels):
        return labels[first][rng.permutation(n_units)][units]
    return labels[rng.permutation(len(labels))]


def control_task_labels(
    token_ids: np.ndarray, labels: np.ndarray, *, seed: int = 0, random_state: int = 0
) -> np.ndarray:
    """Hewitt & Liang control labels: one random label per token type.

    Each distinct token id gets a label drawn from the empirical distribution of ``labels``; every
    row then takes its token's label, so the control label is a function of the token type alone.

    Args:
        token_ids: ``(n_rows,)`` token id of each row.
        labels: ``(n_rows,)`` task labels (only their distribution is used).
        seed: Which control task (a new draw per seed).
        random_state: Base seed.

    Raises:
        ProbeError: Lengths differ, or the rows have no token ids (pooled ``"mean"`` captures).
    """
    token_ids, labels = np.asarray(token_ids), np.asarray(labels)
    if token_ids.shape != labels.shape:
        raise ProbeError(
            f"{len(token_ids)} token ids for {len(labels)} labels; give one token id per row"
        )
    if (token_ids < 0).all():
        raise ProbeError(
            "control='control_task' needs a token id per row, and these rows have none "
            "(a positions='mean' capture); use control='shuffled'"
        )
    types, row_type = np.unique(token_ids, return_inverse=True)
    rng = _rng(random_state, seed, 2)
    return labels[rng.integers(0, len(labels), size=len(types))][row_type]
