"""Conflict cases: two sources, one question, the answer each source gives; JSONL in and out.

A conflict case is what the paper's test items are, with the modality taken out: two sources of
evidence and a question whose answer they disagree on. One JSON object per line::

    {"source_a": "The capital of France is Lyon.", "source_b": "",
     "question": "The capital of France is", "answer_a": "Lyon", "answer_b": "Paris"}

* ``source_a`` / ``source_b``: the two sources, as text. Either may be empty: an empty source is
  the model's own parametric knowledge (context against memory is the text-only case: the context
  sentence is source A and the question alone asks the model's memory).
* ``question``: the prompt the answer follows (a completion prompt suits base models).
* ``answer_a`` / ``answer_b``: the answer each source gives. The study follows their *first
  tokens* (``Y_a`` and ``Y_b``), as the model writes them after the prompt (with a leading space).
* optional ``id`` (a name) and ``control`` (``true``: source A is irrelevant to the question;
  such cases form the control condition).

Sources are text: a line with an ``image`` field is refused in one line (the study reads causal
LMs through their tokenizer; an image source would need a vision-language model's processor).

Each case is run three ways (:func:`prompt`): source A alone, source B alone, and both, always in
the order A, B, question, joined by newlines (empty sources are left out).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from workbench.errors import InputError

FIELDS = ("source_a", "source_b", "question", "answer_a", "answer_b")
"""Required fields of every line."""
OPTIONAL = ("id", "control")
"""Optional fields."""
BUILTIN = Path(__file__).parent / "data" / "capitals.jsonl"
"""The shipped hand-written text-only cases (context sentence against common knowledge)."""
MIN_CASES = 10
"""Fewest conflict cases the follow curve and its bootstrap accept."""

Condition = Literal["a", "b", "both"]
CONDITIONS: tuple[Condition, ...] = ("a", "b", "both")


class CasesError(InputError):
    """A cases file that cannot be read: a bad line, a missing field, too few cases."""


@dataclass(frozen=True)
class ConflictCase:
    """One two-source case (see the module docstring for the fields)."""

    source_a: str
    source_b: str
    question: str
    answer_a: str
    answer_b: str
    id: str = ""
    control: bool = False

    def __post_init__(self) -> None:
        for name in FIELDS:
            if not isinstance(getattr(self, name), str):
                raise CasesError(f"case {self.id!r}: field {name!r} must be a string")
        for name in ("question", "answer_a", "answer_b"):
            if not getattr(self, name).strip():
                raise CasesError(f"case {self.id!r}: field {name!r} is empty")
        if self.answer_a.strip() == self.answer_b.strip():
            raise CasesError(
                f"case {self.id!r}: answer_a and answer_b are both {self.answer_a.strip()!r}; "
                "a conflict needs two different answers"
            )
        if not isinstance(self.control, bool):
            raise CasesError(f"case {self.id!r}: field 'control' must be true or false")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (one line of a cases file); optional fields only when set."""
        out = {k: v for k, v in asdict(self).items() if k in FIELDS}
        if self.id:
            out["id"] = self.id
        if self.control:
            out["control"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConflictCase:
        """Inverse of :meth:`to_dict`."""
        return cls(
            **{k: data[k] for k in FIELDS},
            id=str(data.get("id", "")),
            control=data.get("control", False),
        )


@dataclass(frozen=True)
class CaseSet:
    """The conflict cases and the control cases of one run.

    Attributes:
        conflicts: Cases whose two sources both bear on the question and disagree.
        controls: Cases whose source A is irrelevant to the question.
        source: Where they came from (a file path, ``"builtin"`` or ``"toy"``).
        derived_controls: Whether the controls were derived from the conflicts
            (:func:`derive_controls`) because the file had none.
    """

    conflicts: tuple[ConflictCase, ...]
    controls: tuple[ConflictCase, ...]
    source: str = ""
    derived_controls: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "conflicts", tuple(self.conflicts))
        object.__setattr__(self, "controls", tuple(self.controls))
        if any(c.control for c in self.conflicts) or not all(c.control for c in self.controls):
            raise CasesError("a case set keeps conflicts and controls apart (the 'control' flag)")


def prompt(case: ConflictCase, condition: Condition) -> str:
    """The text the model reads for one condition: the sources it gets, then the question.

    Args:
        case: The case.
        condition: ``"a"`` (source A alone), ``"b"`` (source B alone) or ``"both"``.
    """
    if condition not in CONDITIONS:
        raise InputError(f"unknown condition {condition!r}; use one of {', '.join(CONDITIONS)}")
    parts = []
    if condition in ("a", "both"):
        parts.append(case.source_a)
    if condition in ("b", "both"):
        parts.append(case.source_b)
    parts.append(case.question)
    return "\n".join(p.strip() for p in parts if p.strip())


def parse_line(line: str, where: str) -> ConflictCase:
    """One JSONL line as a case.

    Raises:
        CasesError: Not a JSON object, a missing or non-string field (named, with ``where``).
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CasesError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise CasesError(f"{where}: expected a JSON object with fields {', '.join(FIELDS)}")
    for name in FIELDS:
        if name not in data:
            raise CasesError(
                f"{where}: missing field {name!r} (each line needs {', '.join(FIELDS)})"
            )
        if not isinstance(data[name], str):
            raise CasesError(f"{where}: field {name!r} must be a string, got {data[name]!r}")
    for name in ("question", "answer_a", "answer_b"):
        if not data[name].strip():
            raise CasesError(f"{where}: field {name!r} is empty")
    if "control" in data and not isinstance(data["control"], bool):
        raise CasesError(f"{where}: field 'control' must be true or false, got {data['control']!r}")
    if "image" in data:
        raise CasesError(
            f"{where}: field 'image' is not read: the study's sources are text (write source A "
            "as text, e.g. a description of the image)"
        )
    if data["answer_a"].strip() == data["answer_b"].strip():
        raise CasesError(
            f"{where}: answer_a and answer_b are both {data['answer_a'].strip()!r}; "
            "a conflict needs two different answers"
        )
    data.setdefault("id", where.rsplit(" ", 1)[-1])
    return ConflictCase.from_dict(data)


def read_cases(path: str | os.PathLike[str]) -> list[ConflictCase]:
    """Every case of a JSONL file, in file order (blank lines skipped).

    Raises:
        CasesError: An unreadable file, or a bad line (its number and the field are named).
    """
    file = Path(path).expanduser()
    if file.suffix != ".jsonl":
        raise CasesError(f"cases={str(path)!r}: use 'builtin' or a .jsonl file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CasesError(f"cannot read cases file {str(path)!r}: {exc}") from None
    cases = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cases.append(parse_line(line, f"{file.name} line {number}"))
    if not cases:
        raise CasesError(f"cases file {str(path)!r} holds no cases")
    return cases


def write_cases(cases: Iterable[ConflictCase], path: str | os.PathLike[str]) -> Path:
    """Writes cases as JSONL, atomically (one object per line, optional fields only when set)."""
    from workbench.files import atomic_write_bytes

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n" for c in cases)
    atomic_write_bytes(target, text.encode("utf-8"))
    return target


def derive_controls(conflicts: Sequence[ConflictCase]) -> list[ConflictCase]:
    """Control cases built from conflicts: each question gets another case's source A.

    Case ``i`` keeps its source B, question and ``answer_b`` and takes the source A and
    ``answer_a`` of the next case whose question differs and whose ``answer_a`` differs from its
    ``answer_b``: a source that names a candidate answer but bears on another question.
    """
    out = []
    n = len(conflicts)
    for i, case in enumerate(conflicts):
        for step in range(1, n):
            donor = conflicts[(i + step) % n]
            if donor.question == case.question:
                continue
            if donor.answer_a.strip() == case.answer_b.strip():
                continue
            out.append(
                ConflictCase(
                    donor.source_a,
                    case.source_b,
                    case.question,
                    donor.answer_a,
                    case.answer_b,
                    id=f"control-{case.id or i}",
                    control=True,
                )
            )
            break
    return out


def split_cases(
    cases: Sequence[ConflictCase], n_cases: int, source: str, *, min_cases: int = MIN_CASES
) -> CaseSet:
    """The first ``n_cases`` conflicts and the controls (the file's own, else derived ones).

    Raises:
        CasesError: Fewer than ``min_cases`` conflict cases.
    """
    conflicts = [c for c in cases if not c.control][:n_cases]
    if len(conflicts) < min_cases:
        raise CasesError(
            f"{source} has {len(conflicts)} conflict case(s) (n_cases={n_cases}); the follow "
            f"curve's bootstrap needs at least {min_cases}"
        )
    controls = [c for c in cases if c.control][:n_cases]
    derived = not controls
    if derived:
        controls = derive_controls(conflicts)
    return CaseSet(tuple(conflicts), tuple(controls), source, derived)
