"""The AcMAS study's parameters, typed and validated (the notebook's parameters cell)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workbench.analyses.acmas.toy import MAX_AGENTS
from workbench.analyses.base import StudyConfig
from workbench.errors import ConfigError

LAYER_NAMES = ("early", "middle", "final")


@dataclass(frozen=True)
class AcmasConfig(StudyConfig):
    """Parameters of the AcMAS study.

    Attributes:
        model: ``toy`` (the embedded agent LM, trained on first use), or an HF id/folder of a
            causal LM (then ``transcripts`` must be a JSONL file: its messages are captured).
        transcripts: ``builtin`` (play the toy system) or the path of a JSONL transcript.
        n_agents: Agents in the system (at most 16 for the toy).
        frac_malicious: Fraction of compromised agents, in [0, 1).
        attack: ``stealthy`` (wrong answer about half the time) or ``blatant`` (always wrong).
        schedule: ``sync``, ``async`` or ``both``.
        layers: Comma list of ``early``, ``middle``, ``final`` (first, middle, last block).
        seed: Seeds the agents, the tasks and the event order.
        n_tasks: Attacked tasks per schedule (first half fits the probe, second half is scored).
        n_calib: Clean tasks (no compromised agent) that calibrate the unsupervised detectors
            (every question in turn: at least ``P = 11`` to cover them all).
        turns: Turns per agent per task.
        pooling: ``last`` (last generated token) or ``mean`` (mean over the turn).
        alarm: ``last``: the headline prototype detector also flags a message whose last-token
            activation lies farther from its agent's prototype than every held-out benign
            calibration message (see ``AlarmedPrototypeDetector``; ignored with
            ``pooling="last"``), or ``none``.
        restore_detector: Whose flags (deepest layer) pick the agents to isolate or steer.
        steer_layer: The block whose ``resid_post`` is steered.
        steer_scale: Multiplier of the steering vector (benign minus flagged mean).
        toy_steps: Cap on the toy agent LM's training steps: it trains until it has learned the
            injected behaviour (see :mod:`.toy`) and fails naming the criterion at the cap.
        device: Torch device.
    """

    POSITIVE: ClassVar[tuple[str, ...]] = ("n_agents", "n_tasks", "n_calib", "turns", "toy_steps")
    CACHE_IGNORES: ClassVar[tuple[str, ...]] = ("device",)
    CACHE_VERSION: ClassVar[int] = 12

    model: str = "toy"
    transcripts: str = "builtin"
    n_agents: int = 8
    frac_malicious: float = 0.25
    attack: Literal["stealthy", "blatant"] = "stealthy"
    schedule: Literal["sync", "async", "both"] = "both"
    layers: str = "early,middle,final"
    seed: int = 0
    n_tasks: int = 40
    n_calib: int = 20
    turns: int = 2
    pooling: Literal["last", "mean"] = "mean"
    alarm: Literal["last", "none"] = "last"
    restore_detector: Literal["prototype", "linear_probe", "mahalanobis"] = "prototype"
    steer_layer: Literal["early", "middle", "final"] = "middle"
    steer_scale: float = 1.0
    toy_steps: int = 3000
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.validate()
        f = self.frac_malicious
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 <= f < 1:
            raise ConfigError(f"frac_malicious={f!r} is outside [0, 1); give a fraction like 0.25")
        if self.model == "toy" and self.n_agents > MAX_AGENTS:
            raise ConfigError(f"n_agents={self.n_agents}: the toy has role tokens for {MAX_AGENTS}")
        names = self.layer_names
        if not names or any(n not in LAYER_NAMES for n in names):
            raise ConfigError(f"layers={self.layers!r}; use a comma list of early, middle, final")
        if self.n_tasks < 2:
            raise ConfigError(
                f"n_tasks must be at least 2 (probe and test halves), got {self.n_tasks}"
            )
        if self.model != "toy" and self.transcripts == "builtin":
            raise ConfigError(
                f"model={self.model!r} needs transcripts=<a JSONL file>; "
                "the built-in system runs on the toy"
            )

    @property
    def layer_names(self) -> tuple[str, ...]:
        """The selected layer names, in early-middle-final order."""
        given = [s.strip() for s in str(self.layers).split(",") if s.strip()]
        return (
            tuple(n for n in LAYER_NAMES if n in given)
            if set(given) <= set(LAYER_NAMES)
            else tuple(given)
        )

    @property
    def schedules(self) -> tuple[str, ...]:
        """The schedules to run."""
        return ("sync", "async") if self.schedule == "both" else (self.schedule,)


def layer_index(name: str, n_layers: int) -> int:
    """Block index of ``early`` (0), ``middle`` (n // 2) or ``final`` (n - 1)."""
    return {"early": 0, "middle": n_layers // 2, "final": n_layers - 1}[name]
