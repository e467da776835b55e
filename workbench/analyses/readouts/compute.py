"""Pure steps of the readouts study: labels read off the text, the steering readout.

No model is loaded here: token strings, ids and logits come in, arrays and numbers go out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from workbench.errors import InputError

CHAR_CLASSES = ("letter", "digit", "punct", "space")
"""Classes of the ``char_class`` probe task, by the token's first character."""
_WORD_MARKS = ("Ġ", "▁", "Ċ", "ĉ")
"""How byte-level BPE (Ġ space, Ċ newline, ĉ tab) and SentencePiece (▁) mark a leading space."""


def starts_word(piece: str) -> bool:
    """Whether a vocabulary piece begins a new word (a leading space, newline or tab)."""
    return piece.startswith(_WORD_MARKS) or piece[:1].isspace()


def char_class(piece: str) -> int:
    """Index in :data:`CHAR_CLASSES` of a piece's first character after its space marker."""
    body = piece.lstrip("".join(_WORD_MARKS)).lstrip()
    if not body:
        return CHAR_CLASSES.index("space")
    first = body[0]
    if first.isalpha():
        return CHAR_CLASSES.index("letter")
    if first.isdigit():
        return CHAR_CLASSES.index("digit")
    return CHAR_CLASSES.index("punct")


def probe_labels(
    offsets: np.ndarray, token_ids: np.ndarray, pieces: Sequence[str], task: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The probe task's label for each captured row.

    Args:
        offsets: ``(n_texts + 1,)`` row offsets of the capture.
        token_ids: ``(n_rows,)`` token of each row.
        pieces: The vocabulary's pieces, indexed by token id.
        task: ``word_start``: does the next token start a new word (each text's last row has no
            next token and is dropped); ``char_class``: the class of this token's first character.

    Returns:
        ``(keep, labels, offsets)``: a boolean mask of the rows kept, one label per kept row, and
        the kept rows' text offsets.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    token_ids = np.asarray(token_ids, dtype=np.int64)
    if task == "char_class":
        labels = np.array([char_class(pieces[t]) for t in token_ids], dtype=np.int64)
        return np.ones(len(token_ids), dtype=bool), labels, offsets
    if task != "word_start":
        raise InputError(f"unknown probe task {task!r}; use word_start or char_class")
    keep = np.ones(len(token_ids), dtype=bool)
    keep[offsets[1:] - 1] = False  # each text's last token: no next token to label it by
    starts = np.array([starts_word(pieces[t]) for t in token_ids], dtype=np.int64)
    labels = np.roll(starts, -1)[keep]
    kept_per_text = np.maximum(np.diff(offsets) - 1, 0)
    return keep, labels, np.concatenate([[0], np.cumsum(kept_per_text)])


def word_mass(logits: Tensor, word_tokens: Tensor) -> Tensor:
    """Probability mass the next-token distribution puts on word-starting tokens, per row.

    Args:
        logits: ``(rows, vocab)``.
        word_tokens: ``(vocab,)`` boolean mask of the tokens that start a word.
    """
    probs = torch.softmax(logits.double(), dim=-1)
    return probs[:, word_tokens].sum(-1)


def random_directions(d: int, n: int, norm: float, seed: int) -> Tensor:
    """``n`` random ``(d,)`` vectors of norm ``norm`` (uniform on the sphere), seeded."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    return (v / v.norm(dim=1, keepdim=True) * norm).float()
