"""`workbench replicate`: runs per seed and CPU kernel level, verdicts, resume, one-line errors."""

from __future__ import annotations

import json

import pytest
from runner_helpers import executions, workbench

from workbench.runner.errors import ParameterError
from workbench.runner.replicate import LEVELS, cpu_levels, parse_kernels, parse_seeds


def test_seeds_parse_ranges_and_lists():
    assert parse_seeds("0-9") == list(range(10))
    assert parse_seeds("3") == [3]
    assert parse_seeds("0-2,7, 1") == [0, 1, 2, 7]
    for bad in ("", "5-3", "a-b", "1.5", ","):
        with pytest.raises(ParameterError):
            parse_seeds(bad)


def test_kernel_levels_are_checked_and_the_missing_ones_skipped(monkeypatch):
    have = cpu_levels()
    assert have[0] == "default" and set(have) <= set(LEVELS)
    assert parse_kernels(None) == ([None], {})
    with pytest.raises(ParameterError, match="not a PyTorch CPU kernel level"):
        parse_kernels("default,sse9")
    monkeypatch.setattr("workbench.runner.replicate.cpu_levels", lambda: ("default", "avx2"))
    levels, skipped = parse_kernels("avx512,default,avx2,default")
    assert levels == ["default", "avx2"] and skipped == {"avx512": "this CPU lacks it"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--seeds", "0-1"], "no notebook 'nope'"),
        (["toy", "--seeds", "4-2"], "holds no seed"),
        (["toy", "--seeds", "0-1", "--cpu-kernels", "neon9"], "not a PyTorch CPU kernel"),
        (["toy", "--seeds", "0-1", "-p", "seed", "3"], "seed is set by --seeds"),
        (["toy", "--seeds", "0-1", "-p", "bogus", "3"], "unknown parameter"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = tmp_path / "rep"
    proc = workbench("replicate", *args, "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_replication_per_seed_and_kernel_level_judges_claims_and_resumes(tmp_path):
    out, marker = tmp_path / "rep", tmp_path / "marker.txt"
    levels = [lv for lv in ("default", "avx2") if lv in cpu_levels()]
    args = ["replicate", "toy", "--seeds", "0-1", "-p", "n", "3", "-p", "marker", str(marker)]
    args += ["--cpu-kernels", ",".join(levels), "--out", str(out), "--workers", "2"]
    args += ["--formats", "html"]
    proc = workbench(*args)
    assert proc.returncode == 0, proc.stderr
    runs = 2 * len(levels)
    assert f"{runs} ran, 0 already done, 0 failed" in proc.stdout
    rep = json.loads((out / "replication.json").read_text())
    assert rep["seeds"] == [0, 1] and rep["cpu_kernels"] == levels
    # each run's kernel had ATen's level forced, and its results.json records the level it used
    for row in rep["runs"]:
        assert row["ok"] and row["cpu_capability"] == row["cpu_kernels"].upper()
        record = json.loads((out / "runs" / row["run"] / "results.json").read_text())
        prov = record["provenance"]
        assert prov["numerics_env"]["ATEN_CPU_CAPABILITY"] == row["cpu_kernels"]
        assert prov["cpu_model"] and prov["threads"] >= 1 and "mkl" in prov
        assert record["claims"][0]["definition"]["metric"] == "total"
    claims = {c["name"]: c for c in rep["claims"]}
    # noise = seed % 4 - 1: -1 for seed 0, 0 for seed 1: never positive
    assert claims["the total is positive"]["verdict"] == "robust"
    assert claims["the noise is positive"]["verdict"] == "fragile"
    assert claims["the noise is positive"]["held"] == 0
    assert claims["the total is positive"]["by_kernel"] == dict.fromkeys(levels, 1.0)
    assert rep["metrics"]["mean"]["n"] == runs and rep["metrics"]["noise"]["min"] == -1.0
    # the time it took, and what the runs cost one after another (their own times added up)
    assert all(row["seconds"] > 0 for row in rep["runs"])
    assert rep["seconds"]["runs"] == pytest.approx(sum(r["seconds"] for r in rep["runs"]), abs=0.2)
    assert rep["seconds"]["wall"] > 0
    assert (out / "replication.csv").read_text().count("\n") == runs + 1
    assert (out / "replication.html").is_file() and not (out / "replication.png").exists()
    # the same command again: nothing reruns; other parameters into the same folder are refused
    again = workbench(*args)
    assert again.returncode == 0 and f"0 ran, {runs} already done" in again.stdout
    assert executions(marker) == {"3": runs}
    other = workbench(*[a if a != "3" else "4" for a in args])
    assert other.returncode == 2 and "use another --out" in other.stderr
