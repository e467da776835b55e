"""The only part of the concept-oscillation study that runs models: load, read out, free.

Each case set is run three ways (source A alone, source B alone, both; see
:func:`~workbench.analyses.concept_oscillation.cases.prompt`), at the prompt's last position:

* the single-source runs give the entropy of the next-token distribution (``H_a``, ``H_b``);
* the two-source run gives the model's answer (its top-1), and every layer's residual stream
  (``resid_post.L``), read through the lens (the model's own final norm and unembedding, after a
  tuned lens's translator if one is used: :func:`workbench.lens.core.decode`, the same head the
  workbench's lenses use) for the per-layer top-1 and ``logit(Y_a) - logit(Y_b)``, and given to
  the per-layer probe.

Prompts are text and go through :func:`workbench.capture` (``positions="last"``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench import capture
from workbench.analyses.concept_oscillation.cases import (
    BUILTIN,
    MIN_CASES,
    CasesError,
    CaseSet,
    ConflictCase,
    prompt,
    read_cases,
    split_cases,
)
from workbench.analyses.concept_oscillation.config import ConceptOscillationConfig
from workbench.errors import LensError
from workbench.lens import TunedLens
from workbench.lens.core import decode, lens_sites
from workbench.models import Subject, load_model, quiet_transformers

log = logging.getLogger(__name__)


def file_cases(config: ConceptOscillationConfig) -> CaseSet:
    """The cases of a file (``cases`` a path, or ``builtin`` for a model other than the toy).

    Raises:
        CasesError: A bad line (number and field named) or fewer conflicts than the bootstrap
            needs. Nothing has been loaded yet.
    """
    spec = str(config.cases).strip()
    path = BUILTIN if spec == "builtin" else Path(spec).expanduser()
    name = "builtin" if spec == "builtin" else str(path)
    return split_cases(read_cases(path), config.n_cases, name)


def precheck(model: str) -> None:
    """Checks what can be checked of a model before its weights load: does it have an unembedding?

    Reads only the model's config (a folder or the local Hugging Face cache); anything it cannot
    read is left for :func:`workbench.load_model` to report.

    Raises:
        LensError: The model's family declares no ``unembed`` site (an encoder).
    """
    from workbench import sites

    try:
        import transformers

        config = transformers.AutoConfig.from_pretrained(model, local_files_only=True)
    except Exception:
        return
    kind = getattr(config, "model_type", None)
    for family in sites.families().values():
        if kind in family.model_types and "unembed" not in family.sites:
            raise LensError(
                f"model {model!r} ({family.name} family) has no unembedding (hooks/"
                f"{family.name}.toml declares no 'unembed' site); use a causal LM"
            )


@contextlib.contextmanager
def loaded(name: str, device: str) -> Iterator[Subject]:
    """Loads a model for the block and frees it afterwards.

    Raises:
        LensError: The model has no unembedding (checked before any forward pass).
    """
    quiet_transformers()
    subject = load_model(name, device=device)
    try:
        lens_sites(subject)
        if not subject.is_causal:
            raise LensError(
                f"model {name!r} is not a causal LM; the study reads next-token answers"
            )
        yield subject
    finally:
        device_type = subject.device.type
        del subject
        gc.collect()
        if device_type == "cuda":
            torch.cuda.empty_cache()


def answer_token(tokenizer: Any, text: str, answer: str) -> int:
    """The first token that carries text of ``answer`` as the model writes it after ``text``.

    Found where ``text + " " + answer`` tokenizes differently from ``text`` (this holds for
    byte-level BPE, SentencePiece and word-level tokenizers alike), skipping tokens that decode
    to whitespace only (a lone ``"▁"`` or ``"Ġ"``).

    Raises:
        CasesError: The answer adds no token that carries text.
    """
    base = tokenizer(text, add_special_tokens=True)["input_ids"]
    full = tokenizer(text + " " + answer.strip(), add_special_tokens=True)["input_ids"]
    k = 0
    while k < min(len(base), len(full)) and base[k] == full[k]:
        k += 1
    for token in full[k:]:
        if tokenizer.decode([int(token)]).strip():
            return int(token)
    raise CasesError(f"answer {answer!r} tokenizes to nothing after {text[-40:]!r}")


def answer_tokens(tokenizer: Any, cases: Sequence[ConflictCase]) -> tuple[np.ndarray, np.ndarray]:
    """``(y_a, y_b)``: the first token of each case's two answers after its two-source prompt.

    Raises:
        CasesError: An answer that tokenizes to nothing.
    """
    pairs = [
        (answer_token(tokenizer, prompt(c, "both"), c.answer_a),
         answer_token(tokenizer, prompt(c, "both"), c.answer_b))
        for c in cases
    ]  # fmt: skip
    y = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return y[:, 0], y[:, 1]


def context_length(model_config: Any) -> int | None:
    """The longest input a model takes (``n_positions`` or ``max_position_embeddings``)."""
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(model_config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_lengths(tokenizer: Any, cases: CaseSet, context: int | None) -> None:
    """Checks that every two-source prompt fits the model's context (none is cut silently).

    Raises:
        CasesError: The first case whose prompt is longer than ``context`` tokens.
    """
    if context is None:
        return
    for case in (*cases.conflicts, *cases.controls):
        n = len(tokenizer(prompt(case, "both"), add_special_tokens=True)["input_ids"])
        if n > context:
            raise CasesError(
                f"case {case.id!r}: its two-source prompt has {n} tokens; the model takes at "
                f"most {context}. Shorten its sources or question"
            )


def usable_cases(
    tokenizer: Any, cases: CaseSet, context: int | None = None
) -> tuple[CaseSet, list[str]]:
    """Checks the cases against a tokenizer; drops those whose answers start alike.

    Two answers that start with the same token cannot be told apart by the study, so such cases
    are dropped (with a note).

    Args:
        tokenizer: The model's tokenizer.
        cases: The cases.
        context: The model's context length (every prompt must fit), or ``None``.

    Returns:
        The remaining cases and a note per kind of case dropped.

    Raises:
        CasesError: An answer that tokenizes to nothing, a prompt longer than the context, or
            fewer than the bootstrap's minimum of conflicts left.
    """
    check_lengths(tokenizer, cases, context)
    notes = []
    kept: dict[str, list[ConflictCase]] = {}
    for kind, group in (("conflict", cases.conflicts), ("control", cases.controls)):
        y_a, y_b = answer_tokens(tokenizer, group)
        kept[kind] = [c for c, a, b in zip(group, y_a, y_b, strict=True) if a != b]
        dropped = [c.id for c, a, b in zip(group, y_a, y_b, strict=True) if a == b]
        if dropped:
            notes.append(
                f"{len(dropped)} {kind} case(s) dropped: both answers start with the same token "
                f"({', '.join(dropped[:5])}{', ...' if len(dropped) > 5 else ''})"
            )
    if len(kept["conflict"]) < MIN_CASES:
        raise CasesError(
            f"{cases.source}: {len(kept['conflict'])} conflict case(s) have answers whose first "
            f"tokens differ; the follow curve's bootstrap needs at least {MIN_CASES}"
        )
    out = CaseSet(tuple(kept["conflict"]), tuple(kept["control"]), cases.source,
                  cases.derived_controls)  # fmt: skip
    return out, notes


def model_tokenizer(model: str) -> tuple[Any | None, int | None]:
    """The tokenizer and context length of a folder or a cached hub model, without the weights.

    Returns ``(None, None)`` when they cannot be read that way (the loaded model's are used).
    """
    try:
        import transformers

        tokenizer = transformers.AutoTokenizer.from_pretrained(model, local_files_only=True)
        config = transformers.AutoConfig.from_pretrained(model, local_files_only=True)
    except Exception:  # anything unreadable here is reported by load_model later
        return None, None
    return tokenizer, context_length(config)


def last_position(
    subject: Subject,
    cases: Sequence[ConflictCase],
    condition: str,
    sites: Sequence[str],
    batch_size: int,
) -> dict[str, torch.Tensor]:
    """``{site: (n, width)}`` at the last position of each case's prompt for ``condition``."""
    texts = [prompt(case, condition) for case in cases]  # type: ignore[arg-type]
    acts = capture(
        subject, texts, sites=list(sites), positions="last", batch_size=batch_size,
        progress=False,
    )  # fmt: skip
    return {name: acts[name].float() for name in sites}


def readout(
    subject: Subject,
    cases: Sequence[ConflictCase],
    lens: TunedLens | None,
    batch_size: int,
) -> tuple[dict[str, Any], dict[int, np.ndarray]]:
    """Everything the study reads from one case set.

    Returns:
        ``(fields, features)``: ``fields`` are :class:`~.results.Readout`'s arrays (``y_a``,
        ``y_b``, ``h_a``, ``h_b``, ``top1``, ``lens_top1``, ``lens_diff``, ``layers``, the answer
        tokens' text); ``features`` maps each layer to its ``(n, d)`` float64 ``resid_post`` at
        the last position of the two-source prompt (the probe's input).
    """
    from workbench.analyses.concept_oscillation.compute import entropy

    tokenizer = getattr(subject.tokenizer, "tokenizer", subject.tokenizer)
    y_a, y_b = answer_tokens(tokenizer, cases)
    norm, unembed = lens_sites(subject)
    layers = list(range(subject.n_layers))
    if not cases:
        none, grid = np.zeros(0), np.zeros((len(layers), 0))
        empty = {"ids": (), "layers": np.asarray(layers), "y_a": y_a, "y_b": y_b, "token_a": (),
                 "token_b": (), "h_a": none, "h_b": none, "top1": y_a, "lens_top1": grid,
                 "lens_diff": grid}  # fmt: skip
        return empty, {layer: np.zeros((0, subject.d_model)) for layer in layers}
    entropies = {}
    for condition in ("a", "b"):
        logits = last_position(subject, cases, condition, [unembed.name], batch_size)
        entropies[condition] = entropy(logits[unembed.name].double().numpy())
    names = [f"resid_post.{layer}" for layer in layers]
    both = last_position(subject, cases, "both", [*names, unembed.name], batch_size)
    final = both[unembed.name]
    lens_top1, lens_diff, features = [], [], {}
    index = torch.arange(len(cases))
    with torch.inference_mode():
        for layer, name in zip(layers, names, strict=True):
            h = both[name]
            features[layer] = h.double().numpy()
            if lens is not None:
                h = lens.translate(layer, h)
            logits = decode(subject, norm, unembed, h).cpu()
            lens_top1.append(logits.argmax(-1).numpy())
            ya, yb = torch.from_numpy(y_a), torch.from_numpy(y_b)
            lens_diff.append((logits[index, ya] - logits[index, yb]).double().numpy())
    fields = {
        "ids": tuple(c.id for c in cases),
        "layers": np.asarray(layers),
        "y_a": y_a,
        "y_b": y_b,
        "token_a": tuple(tokenizer.decode([int(t)]) for t in y_a),
        "token_b": tuple(tokenizer.decode([int(t)]) for t in y_b),
        "h_a": entropies["a"],
        "h_b": entropies["b"],
        "top1": final.argmax(-1).numpy(),
        "lens_top1": np.stack(lens_top1),
        "lens_diff": np.stack(lens_diff),
    }
    return fields, features


def train_lens(subject: Subject, cases: CaseSet, seed: int, batch_size: int) -> TunedLens:
    """A tuned lens trained on the study's own prompts (every case, every condition)."""
    texts = [
        prompt(case, condition)  # type: ignore[arg-type]
        for case in (*cases.conflicts, *cases.controls)
        for condition in ("a", "b", "both")
    ]
    texts = [t for t in texts if t.strip()]
    return TunedLens.train(subject, texts, batch_size=batch_size, progress=False, seed=seed)
