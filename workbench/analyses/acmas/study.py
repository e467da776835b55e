"""The AcMAS study end to end: ``run(config, cache_dir)`` and the ``results.json`` metrics.

Units cached with :class:`workbench.cache.UnitCache`: one detection record per schedule and the
restoration record. The trained toy and the activation stores live under ``cache_dir`` too, so a
rerun with the same config trains, loads and captures nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from workbench.analyses.acmas import collect, compute, toy
from workbench.analyses.acmas.config import AcmasConfig, layer_index
from workbench.analyses.acmas.results import AcmasResult, RestorationResult, ScheduleResult
from workbench.analyses.acmas.transcripts import Transcript
from workbench.analyses.base import Study
from workbench.cache import UnitCache
from workbench.criteria import report
from workbench.models.lazy import LazySubject
from workbench.seeds import stream_seed

log = logging.getLogger(__name__)

ANALYSIS = "acmas"


_ALL_LAYERS = ("early", "middle", "final")


class _Work:
    """Lazily trained/loaded model and the activation folders of one run."""

    def __init__(self, config: AcmasConfig, folder: Path, toys: Path, progress: bool) -> None:
        self.config, self.folder, self.toys, self.progress = config, folder, toys, progress
        self.lazy = LazySubject(
            lambda: collect.loaded(collect.agent_model(config, toys, progress), config.device)
        )

    def subject(self):
        return self.lazy.get()

    def layers(self) -> dict[str, int]:
        n = self.subject().n_layers
        return {name: layer_index(name, n) for name in _ALL_LAYERS}


def _questions(seed: int, n: int, salt: str) -> list[int]:
    rng = random.Random(f"{seed}-{salt}")
    return [rng.randrange(toy.P) for _ in range(n)]


def _calib_questions(seed: int, n: int) -> list[int]:
    """The clean calibration run's questions: every operand in turn, in a seeded order.

    With ``n >= P`` the benign reference has seen each question. Drawn at random, 10 or 20
    tasks left 1 to 4 of the 11 questions out (seeds 0-2), and the covariance-aware prototype
    distance, which weighs directions the calibration never varied in heavily, then flagged
    most benign messages of those questions (seed 0 at 10 tasks: half the scored tasks asked an
    unseen question; false-positive rate 0.43).
    """
    rng = random.Random(f"{seed}-calib")
    rounds = [rng.sample(range(toy.P), toy.P) for _ in range(-(-n // toy.P))]
    return [a for r in rounds for a in r][:n]


def _arrays(transcript: Transcript) -> dict[str, np.ndarray]:
    ms = transcript.messages
    ids = {a.id: i for i, a in enumerate(transcript.agents)}

    def num(a: str | None) -> int:
        try:
            return int(a) if a is not None else -1
        except ValueError:
            return -1

    return {
        "labels": np.array([int(m.compromised) for m in ms]),
        "tasks": np.array([m.task for m in ms]),
        "rounds": np.array([m.round if m.round is not None else 0 for m in ms]),
        "answers": np.array([num(m.answer) for m in ms]),
        "senders": np.array([ids[m.sender] for m in ms]),
    }


def _detect(config: AcmasConfig, schedule: str, work: _Work) -> ScheduleResult:
    pool = config.pooling
    alarm = config.alarm == "last" and pool != "last"
    names = config.layer_names
    if config.transcripts == "builtin":
        system = collect.build_system(
            config.n_agents, config.frac_malicious, config.attack, config.seed
        )
        clean = collect.build_system(config.n_agents, 0.0, config.attack, config.seed)
        subject = work.subject()
        layers = work.layers()
        idx = sorted(set(layers.values()))
        attacked = collect.play(
            subject,
            system,
            _questions(config.seed, config.n_tasks, "attack"),
            schedule,
            turns=config.turns,
            seed=config.seed,
        )
        calib = collect.play(
            subject,
            clean,
            _calib_questions(config.seed, config.n_calib),
            schedule,
            turns=config.turns,
            seed=stream_seed(config.seed, "calibration play"),
        )
        root = work.folder / "acts" / schedule
        acts = collect.capture_messages(subject, attacked, idx, root / "attacked")
        cal = collect.capture_messages(subject, calib, idx, root / "calib")
        attacked.write(root / "attacked.jsonl")
        A = {n: acts[pool][layers[n]] for n in names}
        C = {n: cal[pool][layers[n]] for n in names}
        A_alarm = {n: acts["last"][layers[n]] for n in names}
        C_alarm = {n: cal["last"][layers[n]] for n in names}
        arr = _arrays(attacked)
        calib_agents = _arrays(calib)["senders"]
        contexts = np.array([toy.peers_seen(m.context_text) for m in attacked.messages])
        calib_contexts = np.array([toy.peers_seen(m.context_text) for m in calib.messages])
    else:
        from workbench.analyses.acmas import transcripts

        attacked = transcripts.read(config.transcripts)
        subject = work.subject()
        layers = work.layers()
        idx = sorted(set(layers.values()))
        acts = collect.capture_messages(subject, attacked, idx, work.folder / "acts" / "user")
        arr = _arrays(attacked)
        A = {n: acts[pool][layers[n]] for n in names}
        cut = np.sort(np.unique(arr["tasks"]))[len(np.unique(arr["tasks"])) // 2]
        benign_train = (arr["tasks"] < cut) & (arr["labels"] == 0)
        C = {n: A[n][benign_train] for n in names}
        A_alarm = {n: acts["last"][layers[n]] for n in names}
        C_alarm = {n: A_alarm[n][benign_train] for n in names}
        calib_agents = arr["senders"][benign_train]
        contexts = calib_contexts = None  # a transcript does not say what each turn saw
    return compute.evaluate_schedule(
        schedule,
        names,
        C,
        A,
        arr["labels"],
        arr["tasks"],
        arr["rounds"],
        arr["answers"],
        agents=arr["senders"],
        calib_agents=calib_agents,
        contexts=contexts,
        calib_contexts=calib_contexts,
        calib_alarm=C_alarm if alarm else None,
        attacked_alarm=A_alarm if alarm else None,
        seed=config.seed,
    )


def _flagged(config: AcmasConfig, det: ScheduleResult, schedule: str, work: _Work) -> list[int]:
    """Agents whose test messages ``restore_detector`` (deepest layer) flags more often than not."""
    from workbench.analyses.acmas import transcripts

    arr = _arrays(transcripts.read(work.folder / "acts" / schedule / "attacked.jsonl"))
    cut = np.sort(np.unique(arr["tasks"]))[len(np.unique(arr["tasks"])) // 2]
    senders = arr["senders"][arr["tasks"] >= cut]
    flags = det.preds[det.detectors.index(config.restore_detector), -1].astype(bool)
    return [k for k in range(config.n_agents) if flags[senders == k].mean() > 0.5]


def _restore(
    config: AcmasConfig, schedule: str, flagged: Sequence[int], work: _Work
) -> RestorationResult:
    from workbench.analyses.acmas import transcripts
    from workbench.interventions import add

    subject = work.subject()
    layers = work.layers()
    layer = layers[config.steer_layer]
    system = collect.build_system(
        config.n_agents, config.frac_malicious, config.attack, config.seed
    )
    root = work.folder / "acts" / schedule
    attacked = transcripts.read(root / "attacked.jsonl")
    arr = _arrays(attacked)
    X = collect.decision_states(subject, attacked, layer)
    benign = X[~np.isin(arr["senders"], flagged)].mean(0)
    edits = None
    if flagged:
        vector = benign - X[np.isin(arr["senders"], flagged)].mean(0)
        edits = {f"resid_post.{layer}": add(vector.astype(np.float32), scale=config.steer_scale)}
    questions = _questions(config.seed, config.n_tasks, "restore")
    comp, succ = [], []
    for defense in ("none", "isolate", "steer"):
        t = collect.play(
            subject,
            system,
            questions,
            schedule,
            turns=config.turns,
            seed=stream_seed(config.seed, "restoration play"),
            flagged=flagged,
            defense=defense,
            edits=edits,
        )
        final: dict[tuple[int, str], str | None] = {}
        for m in t.messages:
            final[(m.task, m.sender)] = m.answer
        answers, truths, opp_a, opp_t = [], [], [], []
        for q, a in enumerate(questions):
            truth = str(toy.true_answer(a))
            for _k, agent in enumerate(system.agents):
                ans = final.get((q, agent.id))
                answers.append(ans)
                truths.append(truth)
                if agent.compromised and toy.triggered(a, config.attack):
                    opp_a.append(ans)
                    opp_t.append(truth)
        comp.append(compute.completion(answers, truths))
        succ.append(compute.attack_success(opp_a, opp_t))
    return RestorationResult(
        ("none", "isolate", "steer"),
        comp,
        succ,
        tuple(flagged),
        tuple(system.compromised),
        config.steer_layer,
    )


def run(
    config: AcmasConfig,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> AcmasResult:
    """The whole study: detection per schedule, then (built-in system) restoration.

    Args:
        config: The study's parameters.
        cache_dir: Folder of the per-unit cache, the trained toy and the activation stores
            (``None``: a temporary folder, removed afterwards).
        progress: Show progress bars.

    Warns (:class:`~workbench.errors.CriterionWarning`) when the toy agent LM reached its step
    cap before its criterion; the result is returned all the same, its claims not evaluable.
    """
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="acmas-"))
        folder = Path(cache_dir) / f"work-{config.key()}" if cache_dir is not None else Path(tmp)
        toys = Path(cache_dir) if cache_dir is not None else Path(tmp)
        work = _Work(config, folder, toys, progress)
        stack.enter_context(work.lazy)
        cache = UnitCache(cache_dir, config.key())
        schedules = config.schedules
        if config.transcripts != "builtin":
            from workbench.analyses.acmas import transcripts

            schedules = (transcripts.read(config.transcripts).schedule,)
        results = []
        for schedule in tqdm(schedules, desc="schedules", disable=not progress):
            results.append(
                cache.get(
                    f"detect-{schedule}",
                    lambda s=schedule: _detect(config, s, work),
                    ScheduleResult.from_dict,
                )
            )
        notes = []
        restoration = None
        if config.transcripts == "builtin":
            first = results[0]

            def restore() -> RestorationResult:
                flagged = _flagged(config, first, first.schedule, work)
                return _restore(config, first.schedule, flagged, work)

            restoration = cache.get(
                f"restore-{first.schedule}", restore, RestorationResult.from_dict
            )
        else:
            notes.append(
                "restoration skipped: it replays the built-in system (transcripts from a file)"
            )
        if config.frac_malicious == 0:
            notes.append(
                "frac_malicious=0: no compromised agent, F1 and AUROC are undefined (0 / nan)"
            )
        log.info("cache: %d hit(s), %d computed", len(cache.hits), len(cache.misses))
        result = AcmasResult(
            config.model, tuple(results), restoration, notes, _toy_record(config, toys)
        )
    report(result.shortfalls())
    return result


def _toy_record(config: AcmasConfig, toys: Path) -> dict[str, Any] | None:
    """Steps to the criterion, seconds and held-out accuracy of the run's toy (if on disk)."""
    if config.model != "toy":
        return None
    tc = toy.ToyConfig(max_steps=config.toy_steps, seed=config.seed)
    path = toys / f"toy-{tc.key()}" / "training.json"
    if not path.is_file():
        return None
    import json

    record = json.loads(path.read_text())
    return {
        "key": record["key"],
        "steps": record["steps"],
        "seconds": round(record["seconds"], 2),
        "criterion": record["criterion"],
        "learned": record.get("learned", True),
        "accuracy": record["accuracy"],
    }


STUDY = Study(
    name=ANALYSIS,
    config=AcmasConfig,
    result=AcmasResult,
    run=run,
    paper="Activation-based detection of malicious agents (AcMAS, arXiv 2607.06807)",
)
"""The AcMAS study's record in :mod:`workbench.analyses.registry`."""
