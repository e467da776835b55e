"""The AcMAS study on a small trained toy: detection, restoration, cache, stores, the notebook."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support import run_notebook

from workbench import ActivationStore
from workbench.analyses import acmas
from workbench.analyses.acmas import collect, toy
from workbench.analyses.acmas import transcripts as tr

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "acmas.ipynb"


@pytest.fixture(scope="module")
def config():
    # 200 steps keep the tests fast; the prototype needs the default 1500 to flag the agents, so
    # restoration follows the probe here (the slow test below checks the default)
    return acmas.AcmasConfig(
        n_tasks=12, n_calib=8, toy_steps=200, restore_detector="linear_probe", device="cpu"
    )


@pytest.fixture(scope="module")
def study(config, tmp_path_factory):
    cache = tmp_path_factory.mktemp("acmas-cache")
    return acmas.run(config, cache_dir=cache, progress=False), cache


def test_both_schedules_are_scored_at_every_layer(study):
    result, _ = study
    assert [s.schedule for s in result.schedules] == ["sync", "async"]
    for s in result.schedules:
        assert s.layers == ("early", "middle", "final")
        # 12 tasks, the last 6 scored; 8 agents x 2 turns; 2 of 8 agents compromised
        assert len(s.labels) == 6 * 8 * 2 and s.labels.sum() == 6 * 2 * 2
        assert np.all((s.auroc >= 0) & (s.auroc <= 1))


def test_activations_beat_the_text_baseline(study):
    """The issue's claim, on the probe: hidden states flag every compromised message, the text
    baseline only those whose answer the stealthy attack corrupted."""
    result, _ = study
    for s in result.schedules:
        probe_f1 = s.metric("f1", "linear_probe")
        assert probe_f1 > s.text_metrics[0] + 0.2, (s.schedule, probe_f1, s.text_metrics)
        assert s.metric("auroc", "linear_probe") > 0.95
    m = acmas.metrics(result)
    assert m["baseline_f1_text_sync"] < 0.75 and m["baseline_f1_text_async"] < 0.75


def test_restoration_steering_keeps_more_work_than_isolation(study):
    result, _ = study
    r = result.restoration
    assert set(r.flagged) == set(r.compromised) == {4, 5}
    assert r.value("attack_success", "isolate") == 0.0  # isolated agents deliver nothing
    assert r.value("task_completion", "isolate") < r.value("task_completion", "none")
    assert r.value("task_completion", "steer") > r.value("task_completion", "isolate")


def test_stores_and_transcripts_are_on_disk(study, config):
    _, cache = study
    work = cache / f"work-{config.key()}" / "acts" / "sync"
    store = ActivationStore(work / "attacked" / "last")
    assert store.complete and store.sites == ["resid_post.0", "resid_post.1", "resid_post.2"]
    t = tr.read(work / "attacked.jsonl")
    assert store.n_rows == len(t.messages) == 12 * 8 * 2
    assert {m.round for m in t.messages} == {0, 1}


def test_a_rerun_from_the_cache_trains_and_loads_nothing(config, study, monkeypatch):
    result, cache = study

    def fail(*args, **kwargs):
        raise AssertionError("a cached unit was recomputed")

    monkeypatch.setattr(toy, "train_toy", fail)
    monkeypatch.setattr("workbench.load_model", fail)
    again = acmas.run(config, cache_dir=cache, progress=False)
    assert json.dumps(again.to_dict()) == json.dumps(result.to_dict())
    assert tuple(acmas.metrics(again)) == acmas.METRIC_KEYS


def test_results_json_figures_and_round_trip(study, config, tmp_path):
    result, _ = study
    back = acmas.AcmasResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert json.dumps(back.to_dict()) == json.dumps(result.to_dict())
    for kind in result.figure_kinds():
        assert len(result.figure(kind).data) > 0
    path = acmas.save(result, config, tmp_path)
    record = json.loads(path.read_text())
    assert record["analysis"] == "acmas" and tuple(record["metrics"]) == acmas.METRIC_KEYS


def test_user_transcripts_are_scored_from_jsonl(study, config, tmp_path):
    """A JSONL transcript (here the toy's own) is captured and scored; no restoration."""
    _, cache = study
    src = cache / f"work-{config.key()}" / "acts" / "async" / "attacked.jsonl"
    model = next(cache.glob("toy-*")) / f"step-{config.toy_steps}"
    user = replace(config, model=str(model), transcripts=str(src), layers="final")
    result = acmas.run(user, progress=False)
    assert result.restoration is None and any("restoration skipped" in n for n in result.notes)
    (s,) = result.schedules
    assert s.schedule == "async" and s.layers == ("final",)
    assert s.metric("auroc", "linear_probe") > 0.9


def test_play_isolation_drops_the_flagged_agents(study, config):
    _, cache = study
    from workbench import load_model

    subject = load_model(str(next(cache.glob("toy-*")) / f"step-{config.toy_steps}"), device="cpu")
    system = collect.build_system(4, 0.25, "stealthy", 0)
    t = collect.play(subject, system, [1, 7], "async", flagged=[0], defense="isolate")
    assert {m.sender for m in t.messages} == {"R1", "R2", "R3"} and len(t.messages) == 2 * 3 * 2
    times = [(m.task, m.time) for m in t.messages]
    assert times == sorted(times)


@pytest.mark.slow
def test_notebook_runs_under_papermill(tmp_path, html_figures):
    _, record = run_notebook(
        NOTEBOOK,
        {
            "schedule": "sync",
            "n_tasks": 4,
            "n_calib": 4,
            "toy_steps": 60,
        },
        tmp_path,
        cwd=REPO,
    )
    assert all(f.endswith(".html") for f in record["figures"])  # html_figures
    assert record["analysis"] == "acmas" and record["params"]["n_tasks"] == 4
    assert tuple(record["metrics"]) == acmas.METRIC_KEYS
    assert record["metrics"]["f1_async"] is None and record["metrics"]["f1_sync"] is not None
    names = {Path(f).stem for f in record["figures"]}
    assert set(acmas.FIGURES) <= names


@pytest.mark.slow
def test_default_meets_the_issue_success_criteria(tmp_path):
    """The issue's success criteria on the default (fixed seed, toy trained 1500 steps, minutes):
    prototype F1 >= 0.9 in both schedules and above the text baseline, the final layer not worse
    than the early one, steering completes more tasks than isolation."""
    m = acmas.metrics(acmas.run(acmas.AcmasConfig(), cache_dir=tmp_path, progress=False))
    for name in ("sync", "async"):
        assert m[f"f1_{name}"] >= 0.9, m
        assert m[f"f1_{name}"] > m[f"baseline_f1_text_{name}"], m
    assert m["f1_by_layer"]["final"] >= m["f1_by_layer"]["early"], m
    assert m["task_completion_steer"] > m["task_completion_isolate"], m
