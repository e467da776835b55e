"""Inputs to capture: texts, token ids, or a source spec, turned into token-id sequences.

Wherever texts are accepted, a conversation is too: a list of chat messages
(``{"role": "user", "content": "..."}``) is rendered and tokenized by the model's chat template
(:func:`chat_ids`), so its rows are exactly the tokens an instruct model sees. One conversation
alone, or a list of texts and conversations, may be given.

A source spec is a string naming where texts come from:

- ``builtin:pydoc``: the paragraphs of CPython's own reference text (``pydoc_data.topics``), real
  English that every Python installation has;
- a ``.txt`` file: one text a line (blank lines skipped);
- a ``.jsonl`` file: one JSON object a line with a ``text`` field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.errors import InputError

BUILTIN_SOURCES = ("builtin:pydoc",)


def read_texts(source: str | Path, limit: int | None = None) -> list[str]:
    """Reads texts from a source spec (see the module docstring).

    Args:
        source: ``builtin:pydoc``, a ``.txt`` file or a ``.jsonl`` file.
        limit: Keep at most this many texts (the first ones).

    Raises:
        InputError: Unknown spec, unreadable file, a malformed JSON line, or no text at all.
    """
    spec = str(source)
    if spec == "builtin:pydoc":
        texts = _pydoc_paragraphs()
    elif spec.startswith("builtin:"):
        raise InputError(
            f"unknown text source {spec!r}; builtin sources: {', '.join(BUILTIN_SOURCES)}"
        )
    else:
        path = Path(spec).expanduser()
        if path.suffix not in (".txt", ".jsonl"):
            raise InputError(
                f"unknown text source {spec!r}; use builtin:pydoc, a .txt file or a .jsonl file"
            )
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read text source {spec!r}: {exc.strerror or exc}") from exc
        texts = (
            _jsonl_texts(lines, spec)
            if path.suffix == ".jsonl"
            else [ln for ln in lines if ln.strip()]
        )
    if limit is not None:
        if limit < 1:
            raise InputError(f"the number of texts must be at least 1, got {limit}")
        texts = texts[:limit]
    if not texts:
        raise InputError(f"text source {spec!r} holds no text")
    return texts


def _jsonl_texts(lines: list[str], spec: str) -> list[str]:
    texts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(
                f"{spec}:{number}: expected a JSON object with a 'text' field"
            ) from exc
        if not isinstance(text, str):
            raise InputError(f"{spec}:{number}: 'text' must be a string")
        texts.append(text)
    return texts


def _pydoc_paragraphs(min_chars: int = 40) -> list[str]:
    from pydoc_data.topics import topics

    out = []
    for key in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[key]):
            para = " ".join(para.split())
            if len(para) >= min_chars:
                out.append(para)
    return out


@dataclass(frozen=True)
class TokenizedInputs:
    """Token-id sequences, one per text, without padding.

    Attributes:
        sequences: One 1-D int64 tensor per text, each non-empty.
    """

    sequences: tuple[torch.Tensor, ...]

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per text."""
        return np.array([len(s) for s in self.sequences], dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """Row offsets: text ``i`` is rows ``offsets[i]:offsets[i + 1]``."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    @property
    def token_ids(self) -> np.ndarray:
        """All token ids concatenated in input order."""
        return torch.cat(self.sequences).numpy().astype(np.int64)

    def digest(self) -> str:
        """SHA-256 of the token ids and text boundaries: what identifies these inputs."""
        h = hashlib.sha256()
        h.update(self.offsets.tobytes())
        h.update(self.token_ids.tobytes())
        return h.hexdigest()


Conversation = Sequence[Mapping[str, str]]
"""Chat messages, each with a ``role`` and a ``content``, in order."""


def is_conversation(item: Any) -> bool:
    """Whether ``item`` is a non-empty list of chat messages (mappings with role and content)."""
    return (
        isinstance(item, Sequence)
        and not isinstance(item, str | bytes)
        and len(item) > 0
        and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in item)
    )


def chat_ids(tokenizer: Any, messages: Conversation) -> list[int]:
    """Token ids of one conversation through the tokenizer's chat template.

    The template adds the model's own special tokens (no others are added). When the last
    message is not the assistant's, the assistant's turn is opened (``add_generation_prompt``),
    so that the last position predicts the start of the reply, as in generation.

    Raises:
        InputError: The tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise InputError(
            f"{type(tokenizer).__name__} has no chat template: give plain texts, or a model "
            "whose tokenizer has one (an instruct model such as 'smollm2')"
        )
    messages = [dict(m) for m in messages]
    encoded = tokenizer.apply_chat_template(
        messages,
        tokenize=True,
        add_generation_prompt=messages[-1]["role"] != "assistant",
        return_dict=True,
    )
    return [int(i) for i in encoded["input_ids"]]


def tokenize(
    tokenizer: Any,
    inputs: str
    | Path
    | Sequence[str | Conversation]
    | Conversation
    | Sequence[Sequence[int]]
    | torch.Tensor,
    *,
    max_length: int,
    vocab_size: int,
    limit: int | None = None,
) -> TokenizedInputs:
    """Turns any accepted input into token-id sequences.

    Args:
        tokenizer: The model's tokenizer (special tokens such as BERT's [CLS] are added).
        inputs: A source spec (``str`` or ``Path``), a list of texts, a conversation (a list
            of chat messages) or a list of texts and conversations, a list of token-id lists or
            1-D tensors, or a 2-D tensor of token ids (one text a row, no padding).
        max_length: Longer sequences are truncated to this many tokens.
        vocab_size: Token ids must lie in ``[0, vocab_size)``.
        limit: For a source spec, keep only the first ``limit`` texts.

    Raises:
        InputError: Empty input, an empty text, or token ids out of range.
    """
    if isinstance(inputs, str | Path):
        inputs = read_texts(inputs, limit)
    if isinstance(inputs, torch.Tensor):
        if inputs.dim() != 2:
            raise InputError(
                f"a token-id tensor must be 2-D (texts x tokens), got shape {tuple(inputs.shape)}"
            )
        seqs = [row for row in inputs]
    else:
        items = list(inputs)
        if not items:
            raise InputError("no input: give at least one text or token sequence")
        if is_conversation(items):
            items = [items]
        if any(is_conversation(t) for t in items):
            seqs = []
            for i, item in enumerate(items):
                if isinstance(item, str):
                    if not item.strip():
                        raise InputError(f"text {i} is empty")
                    ids = tokenizer(item, add_special_tokens=True)["input_ids"]
                elif is_conversation(item):
                    ids = chat_ids(tokenizer, item)
                else:
                    raise InputError(
                        f"input {i} is neither a text nor a conversation (a list of messages "
                        "with 'role' and 'content'); give one kind"
                    )
                seqs.append(torch.tensor(ids, dtype=torch.long))
        elif all(isinstance(t, str) for t in items):
            for i, text in enumerate(items):
                if not text.strip():
                    raise InputError(f"text {i} is empty")
            encoded = tokenizer(
                items, add_special_tokens=True, truncation=True, max_length=max_length
            )
            seqs = [torch.tensor(ids, dtype=torch.long) for ids in encoded["input_ids"]]
        elif any(isinstance(t, str) for t in items):
            raise InputError("inputs mix texts and token ids; give one kind")
        else:
            seqs = [torch.as_tensor(t, dtype=torch.long).reshape(-1) for t in items]
    seqs = [s[:max_length].to(torch.long).cpu() for s in seqs]
    if not seqs:
        raise InputError("no input: give at least one text or token sequence")
    for i, s in enumerate(seqs):
        if len(s) == 0:
            raise InputError(f"input {i} has no tokens")
        if int(s.min()) < 0 or int(s.max()) >= vocab_size:
            raise InputError(f"input {i} has token ids outside [0, {vocab_size})")
    return TokenizedInputs(tuple(seqs))
