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
from workbench.criteria import report
from workbench.errors import CriterionWarning

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "notebooks" / "acmas.ipynb"


@pytest.fixture(scope="module")
def config():
    # the toy trains to its criterion (a few hundred steps); restoration follows the probe here
    # (the claims test checks the prototype detector over seeds)
    return acmas.AcmasConfig(n_tasks=12, n_calib=8, restore_detector="linear_probe", device="cpu")


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
    m = result.metrics()
    assert m["baseline_f1_text_sync"] < 0.75 and m["baseline_f1_text_async"] < 0.75


def test_restoration_isolates_the_flagged_agents(study):
    result, _ = study
    r = result.restoration
    assert set(r.flagged) == set(r.compromised) == {4, 5}
    assert r.value("attack_success", "isolate") == 0.0  # isolated agents deliver nothing
    assert r.value("task_completion", "isolate") < r.value("task_completion", "none")
    # "steering completes more tasks than isolation" is a finding, not a property of the code: it
    # is a claim (test_acmas_claims.py, over seeds). On this one seed at test size it held under
    # AVX-512 (0.85 vs 0.75) and tied under ATEN_CPU_CAPABILITY=avx2 (0.75 vs 0.75), so it
    # cannot be asserted on one training here.


def test_stores_and_transcripts_are_on_disk(study, config):
    _, cache = study
    work = cache / f"work-{config.key()}" / "acts" / "sync"
    store = ActivationStore(work / "attacked" / "last")
    assert store.complete and store.sites == ["resid_post.0", "resid_post.1", "resid_post.2"]
    t = tr.read(work / "attacked.jsonl")
    assert store.n_rows == len(t.messages) == 12 * 8 * 2
    assert {m.round for m in t.messages} == {0, 1}


def test_a_rerun_from_the_cache_trains_and_loads_nothing(
    config, study, monkeypatch, forbid_model_loading
):
    result, cache = study

    def fail(*args, **kwargs):
        raise AssertionError("a cached unit was recomputed")

    monkeypatch.setattr(toy, "train_toy", fail)
    again = acmas.run(config, cache_dir=cache, progress=False)
    assert json.dumps(again.to_dict()) == json.dumps(result.to_dict())
    assert tuple(again.metrics()) == acmas.METRIC_KEYS


def test_results_json_figures_and_round_trip(study, config, tmp_path):
    result, _ = study
    back = acmas.AcmasResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert json.dumps(back.to_dict()) == json.dumps(result.to_dict())
    for kind in result.figure_kinds():
        assert len(result.figure(kind).data) > 0
    path = result.save(config, tmp_path)
    record = json.loads(path.read_text())
    assert record["analysis"] == "acmas" and tuple(record["metrics"]) == acmas.METRIC_KEYS


def test_user_transcripts_are_scored_from_jsonl(study, config, tmp_path):
    """A JSONL transcript (here the toy's own) is captured and scored; no restoration."""
    _, cache = study
    src = cache / f"work-{config.key()}" / "acts" / "async" / "attacked.jsonl"
    model = next(cache.glob("toy-*")) / "model"
    user = replace(config, model=str(model), transcripts=str(src), layers="final")
    result = acmas.run(user, progress=False)
    assert result.restoration is None and any("restoration skipped" in n for n in result.notes)
    (s,) = result.schedules
    assert s.schedule == "async" and s.layers == ("final",)
    assert s.metric("auroc", "linear_probe") > 0.9


def test_play_isolation_drops_the_flagged_agents(study, config):
    _, cache = study
    from workbench import load_model

    subject = load_model(str(next(cache.glob("toy-*")) / "model"), device="cpu")
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


def test_the_toy_is_trained_to_its_criterion_and_cached_by_recipe(study, config):
    result, cache = study
    record = json.loads(next(cache.glob("toy-*/training.json")).read_text())
    assert record["steps"] < config.toy_steps and min(record["accuracy"].values()) >= 0.99
    assert result.toy["steps"] == record["steps"] and result.metrics()["toy"] == result.toy
    base = toy.ToyConfig()
    assert (
        next(cache.glob("toy-*")).name == f"toy-{toy.ToyConfig(max_steps=config.toy_steps).key()}"
    )
    assert len({base.key(), replace(base, lr=1e-2).key(), replace(base, seed=1).key()}) == 3


def test_reaching_the_cap_first_keeps_the_toy_and_records_the_shortfall(tmp_path, study):
    toy.train_toy(toy.ToyConfig(max_steps=20, eval_every=10), tmp_path / "t", progress=False)
    record = json.loads((tmp_path / "t" / "training.json").read_text())
    assert record["learned"] is False and record["steps"] == 20
    assert min(record["accuracy"].values()) < 0.99
    result, _ = study
    assert result.toy["learned"] is True and result.shortfalls() == ()
    missed = replace(result, toy={**result.toy, **{k: record[k] for k in ("steps", "learned")}})
    (short,) = missed.shortfalls()
    assert short.steps == 20 and "raise toy_steps" in short.message()
    claims = missed.claims()  # every claim rests on the toy having learned its behaviour
    assert all(r.holds is None and r.not_evaluable for r in claims)
    assert [r.value for r in claims] == [r.value for r in result.claims()]
    with pytest.warns(CriterionWarning, match=r"toy agent LM training missed its criterion"):
        report(missed.shortfalls())


def test_metrics_carry_average_precision_and_task_intervals(study):
    result, _ = study
    m = result.metrics()
    for name in ("sync", "async"):
        assert 0 <= m[f"ap_{name}"] <= 1
        ci = m["ci95"][name]["prototype"]
        for key, point in (("f1", m[f"f1_{name}"]), ("auroc", m[f"auroc_{name}"])):
            lo, hi = ci[key]
            assert (lo <= hi and lo - 1e-9 <= point <= hi + 1e-9) or np.isnan(point)
    names = {c.name for c in acmas.CLAIMS}
    assert "final layer not worse than early" in names
    assert result.claims().results  # every claim reads a reported metric
