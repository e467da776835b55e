"""The runner: plays a multi-agent system on a causal LM and captures each message's activations.

Each agent is the same model under its own role prompt. A *task* is one question ``Q a =`` that
every agent answers in ``turns`` turns; a turn's prompt holds the agent's role prompt, the last two
answers to the task it has seen from peers, and the question. Generation is the model's own
``generate`` (greedy, two new tokens: the answer and ``;``).

* **sync**: turns are rounds in lockstep; in round ``t`` every agent sees its two ring neighbours'
  answers of round ``t - 1``.
* **async**: each agent posts each of its turns at a random time; a turn sees the last two
  answers posted before it.

A *defense* acts on a set of flagged agents: ``isolate`` drops them (they post nothing, their
answers are lost), ``steer`` lets them generate inside an :func:`workbench.interventions.intervene`
block that adds a steering vector toward the benign prototype (removed when the block exits).

:func:`capture_messages` captures, per message, the last token and the mean over the turn at
chosen ``resid_post`` layers, streamed into an :class:`~workbench.store.ActivationStore` (resumable,
memory bounded by the shard size). This is the only module that loads or trains models.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from workbench.analyses.acmas import toy
from workbench.analyses.acmas.config import AcmasConfig
from workbench.analyses.acmas.transcripts import Agent, Message, Transcript
from workbench.cache import trained


@dataclass(frozen=True)
class System:
    """Who the agents are: prompts, which are compromised, and by which attack."""

    agents: tuple[Agent, ...]
    attack: str

    @property
    def compromised(self) -> list[int]:
        """Indices of the compromised agents."""
        return [i for i, a in enumerate(self.agents) if a.compromised]


def build_system(n_agents: int, frac_malicious: float, attack: str, seed: int) -> System:
    """Role prompts for ``n_agents``; ``round(frac_malicious * n_agents)`` get the injection."""
    rng = random.Random(seed)
    notes = [rng.choice(toy.BENIGN_NOTES) for _ in range(n_agents)]  # same with frac 0
    bad = set(rng.sample(range(n_agents), round(frac_malicious * n_agents)))
    agents = []
    for k, note in enumerate(notes):
        injection = attack if k in bad else None
        prompt = toy.role_prompt(k, "" if injection else note, injection)
        agents.append(Agent(f"R{k}", "solver", prompt, k in bad))
    return System(tuple(agents), attack)


@contextlib.contextmanager
def loaded(path: str | Path, device: str = "cpu") -> Iterator:
    """Loads the agent model (any causal LM folder or id) and frees it on exit."""
    from workbench import load_model

    subject = load_model(str(path), device=device)
    try:
        yield subject
    finally:
        del subject


def agent_model(config: AcmasConfig, toys: Path, progress: bool = True) -> str:
    """The agents' model: ``config.model``, or for ``toy`` the trained toy's folder.

    The toy is trained to its criterion on first use into ``toys/toy-<recipe key>``.
    """
    if config.model != "toy":
        return config.model
    recipe = toy.ToyConfig(max_steps=config.toy_steps, seed=config.seed)
    return str(ensure_toy(toys, recipe, progress))


def ensure_toy(toys: Path, config: toy.ToyConfig, progress: bool = True) -> Path:
    """The trained agent LM of ``config`` (its ``model`` folder), trained to criterion on first use.

    It lives in ``toys/toy-<config.key()>`` (:func:`workbench.cache.trained`: keyed on the whole
    recipe, so a changed recipe never reuses an older toy; one process trains it at a time).
    """
    folder = trained(
        toys, "toy", config.recipe(), lambda out: toy.train_toy(config, out, progress=progress)
    )
    return folder / "model"


@torch.no_grad()
def _generate(subject, prompts: list[str], edits: dict | None) -> list[str]:
    from workbench.interventions import intervene

    tok = subject.tokenizer
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    enc = {k: v.to(subject.device) for k, v in enc.items()}
    ctx = intervene(subject, edits) if edits else contextlib.nullcontext()
    with ctx:
        out = subject.model.generate(
            **enc, max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id
        )
    return [
        tok.decode(row, skip_special_tokens=False).strip()
        for row in out[:, enc["input_ids"].shape[1] :]
    ]


def play(
    subject,
    system: System,
    questions: Sequence[int],
    schedule: str,
    *,
    turns: int = 2,
    seed: int = 0,
    flagged: Sequence[int] = (),
    defense: str = "none",
    edits: dict | None = None,
) -> Transcript:
    """Plays every task under ``schedule``; returns the transcript (messages in event order).

    Args:
        subject: The agent model.
        system: The agents.
        questions: One operand ``a`` per task.
        schedule: ``sync`` or ``async``.
        turns: Turns per agent per task.
        seed: Seeds the async event order.
        flagged: Agents the defense acts on.
        defense: ``none``, ``isolate`` or ``steer``.
        edits: The steering edits (``{site: add(...)}``) for ``steer``.
    """
    rng = random.Random(seed)
    n = len(system.agents)
    active = [k for k in range(n) if not (defense == "isolate" and k in set(flagged))]
    steered = set(flagged) if defense == "steer" else set()
    # events: (task, agent, turn, time, round); one batch per wave of simultaneous events
    waves: list[list[tuple[int, int, int, float, int | None]]] = []
    if schedule == "sync":
        for t in range(turns):
            waves.append([(q, k, t, float(t), t) for q in range(len(questions)) for k in active])
    else:
        orders = []
        for q in range(len(questions)):
            ev = [(k, t) for k in active for t in range(turns)]
            times = sorted(rng.random() * turns for _ in ev)
            rng.shuffle(ev)
            ev.sort(key=lambda e: e[1])  # an agent's turns keep their order
            orders.append([(q, k, t, times[i], None) for i, (k, t) in enumerate(ev)])
        for i in range(max(map(len, orders), default=0)):
            waves.append([o[i] for o in orders if i < len(o)])
    posted: dict[int, list[tuple[int, int, int]]] = {q: [] for q in range(len(questions))}
    messages: list[Message] = []
    for wave in waves:
        prompts = []
        for q, k, t, _, _ in wave:
            if schedule == "sync":
                seen = [
                    (j, c)
                    for j, tt, c in posted[q]
                    if tt == t - 1 and j in ((k - 1) % n, (k + 1) % n)
                ]
            else:
                seen = [(j, c) for j, _, c in posted[q]][-2:]
            prompts.append(toy.turn_prompt(system.agents[k].prompt, seen, questions[q]))
        outs = [""] * len(wave)
        for group, group_edits in ((False, None), (True, edits)):
            idx = [i for i, e in enumerate(wave) if (e[1] in steered) == group]
            if idx:
                for i, o in zip(
                    idx, _generate(subject, [prompts[i] for i in idx], group_edits), strict=True
                ):
                    outs[i] = o
        for (q, k, t, time, rnd), prompt, out in zip(wave, prompts, outs, strict=True):
            answer = out.split()[0] if out.split() else ""
            with contextlib.suppress(ValueError):
                posted[q].append((k, t, int(answer)))
            messages.append(
                Message(
                    system.agents[k].id,
                    q,
                    t,
                    time,
                    rnd,
                    out,
                    f"{prompt} {out}",
                    system.agents[k].compromised,
                    answer,
                    str(toy.true_answer(questions[q])),
                )
            )
    if schedule == "async":
        messages.sort(key=lambda m: (m.task, m.time))
    return Transcript(schedule, system.agents, tuple(messages))


def capture_messages(
    subject, transcript: Transcript, layers: Sequence[int], out: str | Path, progress: bool = False
) -> dict[str, dict[int, np.ndarray]]:
    """Captures each message's ``resid_post`` activations at ``layers`` into stores under ``out``.

    Returns ``{"last": {layer: (n_messages, d)}, "mean": {...}}`` read back from the stores
    (``out/last`` and ``out/mean``, each an :class:`~workbench.store.ActivationStore`).
    """
    from workbench import capture

    texts = [m.context_text for m in transcript.messages]
    result: dict[str, dict[int, np.ndarray]] = {}
    for pooling in ("last", "mean"):
        store = capture(
            subject,
            texts,
            sites="resid_post",
            layers=list(layers),
            positions=pooling,
            out=Path(out) / pooling,
            batch_size=64,
            progress=progress,
        )
        result[pooling] = {
            layer: np.asarray(store.read(f"resid_post.{layer}"), dtype=np.float64)
            for layer in layers
        }
    return result


def decision_states(subject, transcript: Transcript, layer: int) -> np.ndarray:
    """``resid_post.layer`` at the last prompt token of each turn (where the answer is decided).

    The steering vector is a difference of these (in memory: one layer, one row per message).
    """
    from workbench import capture

    prompts = [m.context_text.removesuffix(m.content).strip() for m in transcript.messages]
    acts = capture(subject, prompts, sites=f"resid_post.{layer}", positions="last", progress=False)
    return acts[f"resid_post.{layer}"].double().numpy()
