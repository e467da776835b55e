"""`workbench.records`: the one home of results.json, below both the studies and the runner."""

from __future__ import annotations

import json

from workbench import records
from workbench.runner import results as runner_results


def test_the_runner_re_exports_the_records_functions():
    for name in ("save_results", "read_results", "complete_provenance", "RESULTS"):
        assert getattr(runner_results, name) is getattr(records, name)


def test_a_saved_record_reads_back_only_once_complete(tmp_path):
    fig = tmp_path / "figures" / "a.pdf"
    path = records.save_results(
        tmp_path,
        analysis="toy",
        params={"n": 2},
        metrics={"x": 1.5, "nan": float("nan")},
        figures=[fig],
        seed=3,
        notes=["skipped y"],
    )
    record = json.loads(path.read_text())
    keys = {"analysis", "params", "metrics", "figures", "claims", "provenance", "notes"}
    assert set(record) == keys
    assert record["figures"] == ["figures/a.pdf"]
    assert record["metrics"]["nan"] is None
    assert records.read_results(tmp_path) is None  # the runner has not completed it
    assert records.read_results(tmp_path, complete=False)["params"] == {"n": 2}
    done = {"git_commit": "abc", "versions": {}, "started": "now", "seconds": 1.0, "seed": 9}
    records.complete_provenance(path, params={"n": 5, "m": 1}, provenance=done)
    again = records.read_results(tmp_path)
    assert again["params"] == {"n": 2, "m": 1}  # the notebook's own values win
    assert again["provenance"]["seed"] == 3 and again["provenance"]["git_commit"] == "abc"
