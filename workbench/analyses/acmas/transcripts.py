"""Multi-agent transcripts: agents with roles, messages with sender, time and turn, span labels.

A transcript is JSON Lines (format ``workbench.transcript/1``), one object a line, so transcripts
from real agent frameworks can be converted with a few lines of code:

1. a header ``{"type": "transcript", "format": "workbench.transcript/1", "schedule": "sync"}``
   (``schedule``: ``sync``, rounds in lockstep, or ``async``, an event order);
2. ``{"type": "agent", "id": "R0", "role": "solver", "prompt": "...", "compromised": false}`` for
   each agent, before any message it sends (``compromised``: the ground truth, optional);
3. ``{"type": "message", "sender": "R0", "task": 0, "turn": 0, "time": 0.0, "round": 0,
   "content": "5 ;", "text": "...", "compromised": false, "answer": "5", "truth": "5"}``:
   ``sender`` a declared agent; ``task``/``turn`` integers; ``time`` a number (the event order
   in ``async``); ``round`` an integer in ``sync``, ``null`` in ``async``; ``content`` what the
   agent wrote. Optional: ``text`` (what the model read and wrote in that turn, the text whose
   activations are captured; default ``content``), ``compromised`` (the span label; default the
   sender's), ``answer`` and ``truth`` (for the text baseline and task completion).

Reading checks every line and raises a one-line :class:`~workbench.errors.TranscriptError`
naming the line and the field; writing is atomic.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.errors import TranscriptError
from workbench.files import atomic_write_bytes

FORMAT = "workbench.transcript/1"
SCHEDULES = ("sync", "async")


@dataclass(frozen=True)
class Agent:
    """One agent: its id, role, role prompt and whether it is compromised (ground truth)."""

    id: str
    role: str = "agent"
    prompt: str = ""
    compromised: bool = False


@dataclass(frozen=True)
class Message:
    """One message of a transcript (see the module docstring for the fields)."""

    sender: str
    task: int
    turn: int
    time: float
    round: int | None
    content: str
    text: str = ""
    compromised: bool = False
    answer: str | None = None
    truth: str | None = None

    @property
    def context_text(self) -> str:
        """The text whose activations are captured (``text``, else ``content``)."""
        return self.text or self.content


@dataclass(frozen=True)
class Transcript:
    """A schedule, its agents and its messages in event order."""

    schedule: str
    agents: tuple[Agent, ...]
    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise TranscriptError(f"schedule {self.schedule!r}; use sync or async")
        ids = {a.id for a in self.agents}
        for i, m in enumerate(self.messages):
            if m.sender not in ids:
                raise TranscriptError(f"message {i}: sender {m.sender!r} is not a declared agent")

    @property
    def labels(self) -> list[int]:
        """The span labels: 1 for a message from a compromised agent."""
        return [int(m.compromised) for m in self.messages]

    def to_jsonl(self) -> str:
        """The JSONL text (header, agents, messages)."""
        lines = [{"type": "transcript", "format": FORMAT, "schedule": self.schedule}]
        lines += [{"type": "agent", **asdict(a)} for a in self.agents]
        lines += [{"type": "message", **asdict(m)} for m in self.messages]
        return "".join(json.dumps(x) + "\n" for x in lines)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Writes the transcript atomically; returns the path."""
        atomic_write_bytes(path, self.to_jsonl().encode())
        return Path(path)


def _field(obj: dict, name: str, kinds: tuple[type, ...], line: int, accepted: str, **kw: Any):
    if name not in obj:
        if "default" in kw:
            return kw["default"]
        raise TranscriptError(f"transcript line {line}: missing field {name!r} ({accepted})")
    value = obj[name]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if value is None and kw.get("nullable"):
        return None
    if not ok:
        raise TranscriptError(
            f"transcript line {line}: field {name!r} is {value!r}; expected {accepted}"
        )
    return value


def parse(text: str) -> Transcript:
    """Parses JSONL text into a :class:`Transcript`, checking the schema line by line.

    Raises:
        TranscriptError: One line naming the transcript line, the field and what is accepted.
    """
    lines = [(i + 1, s) for i, s in enumerate(text.splitlines()) if s.strip()]
    if not lines:
        raise TranscriptError("transcript is empty; line 1 must be a 'transcript' header")
    objs = []
    for n, s in lines:
        try:
            obj = json.loads(s)
        except ValueError:
            raise TranscriptError(f"transcript line {n}: not valid JSON") from None
        if not isinstance(obj, dict):
            raise TranscriptError(f"transcript line {n}: expected a JSON object")
        objs.append((n, obj))
    n, head = objs[0]
    if head.get("type") != "transcript":
        raise TranscriptError(f"transcript line {n}: field 'type' must be 'transcript' first")
    if head.get("format", FORMAT) != FORMAT:
        raise TranscriptError(f"transcript line {n}: field 'format' must be {FORMAT!r}")
    schedule = head.get("schedule")
    if schedule not in SCHEDULES:
        raise TranscriptError(
            f"transcript line {n}: field 'schedule' is {schedule!r}; use sync or async"
        )
    agents: dict[str, Agent] = {}
    messages = []
    for n, obj in objs[1:]:
        kind = obj.get("type")
        if kind == "agent":
            aid = _field(obj, "id", (str,), n, "a string")
            if aid in agents:
                raise TranscriptError(f"transcript line {n}: field 'id' {aid!r} declared twice")
            agents[aid] = Agent(
                aid,
                _field(obj, "role", (str,), n, "a string", default="agent"),
                _field(obj, "prompt", (str,), n, "a string", default=""),
                _field(obj, "compromised", (bool,), n, "true or false", default=False),
            )
        elif kind == "message":
            sender = _field(obj, "sender", (str,), n, "a declared agent id")
            if sender not in agents:
                raise TranscriptError(
                    f"transcript line {n}: field 'sender' {sender!r} is used before it is "
                    "declared; add an 'agent' line for it above"
                )
            rnd = _field(obj, "round", (int,), n, "an integer (sync) or null", nullable=True)
            if schedule == "sync" and rnd is None:
                raise TranscriptError(
                    f"transcript line {n}: field 'round' must be an integer in sync"
                )
            messages.append(
                Message(
                    sender,
                    _field(obj, "task", (int,), n, "an integer"),
                    _field(obj, "turn", (int,), n, "an integer"),
                    float(_field(obj, "time", (int, float), n, "a number")),
                    rnd,
                    _field(obj, "content", (str,), n, "a string"),
                    _field(obj, "text", (str,), n, "a string", default=""),
                    _field(
                        obj,
                        "compromised",
                        (bool,),
                        n,
                        "true or false",
                        default=agents[sender].compromised,
                    ),
                    _field(
                        obj, "answer", (str,), n, "a string or null", default=None, nullable=True
                    ),
                    _field(
                        obj, "truth", (str,), n, "a string or null", default=None, nullable=True
                    ),
                )
            )
        else:
            raise TranscriptError(
                f"transcript line {n}: field 'type' is {kind!r}; use 'agent' or 'message'"
            )
    return Transcript(schedule, tuple(agents.values()), tuple(messages))


def read(path: str | os.PathLike[str]) -> Transcript:
    """Reads a JSONL transcript file (see :func:`parse`)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TranscriptError(f"cannot read transcript {str(path)!r}: {exc.strerror}") from None
    return parse(text)
