"""`workbench sweep`: a row per point, retries, claims, a real Ray cluster (kills and resumes:
test_interrupts.py)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from runner_helpers import cli, cli_env, executions, table, workbench, write_grid

from workbench.figures import static_export_problem
from workbench.runner.errors import GridError
from workbench.runner.grid import load_grid, parse_grid, point_id

LIGHT = "fixed:\n  formats: html\n  marker: {marker}\n"


def grid_file(tmp_path, axes: str, **fixed) -> tuple:
    marker = tmp_path / "marker.txt"
    extra = "".join(f"  {k}: {v}\n" for k, v in fixed.items())
    path = write_grid(tmp_path / "grid.yaml", axes + LIGHT.format(marker=marker) + extra)
    return path, marker


def test_grid_points_are_a_cartesian_product_with_stable_ids(tmp_path):
    grid = parse_grid({"n": [1, 2, 3], "scale": [0.5, 1.0], "fixed": {"model": "m"}})
    points = grid.points()
    assert len(points) == 6 and all(p["model"] == "m" for p in points)
    assert point_id({"a": 1, "b": 2}) == point_id({"b": 2, "a": 1}) != point_id({"a": 2, "b": 2})
    for bad in ({"n": 3}, {"n": []}, ["n"], {"n": [1], "fixed": {"n": 2}}):
        with pytest.raises(GridError):
            parse_grid(bad)
    with pytest.raises(GridError, match="cannot read"):
        load_grid(tmp_path / "missing.yaml")


@pytest.mark.slow
def test_sweep_tabulates_every_run_once_and_retries_failures(tmp_path):
    grid, marker = grid_file(tmp_path, "n: [2, 3]\nfail: [false, true]\n")
    out = tmp_path / "sweep"
    proc = workbench("sweep", "toy", "--grid", str(grid), "--out", str(out), "--workers", "2")
    assert proc.returncode == 1, proc.stderr  # two points fail twice
    assert "2 ran, 0 already done, 2 failed" in proc.stdout
    rows = table(out)
    assert len(rows) == 4 and len({r["run"] for r in rows}) == 4
    ok = [r for r in rows if r["status"] == "ok"]
    bad = [r for r in rows if r["status"] == "failed"]
    assert {r["params.n"] for r in ok} == {2, 3} and all(not r["params.fail"] for r in ok)
    assert all("cell-error" in r["error"] and "ValueError" in r["error"] for r in bad)
    assert all(r["metrics.total"] > 0 and r["provenance.seconds"] > 0 for r in ok)
    assert all(json.loads(r["metrics.squares"]) for r in ok)  # lists kept as JSON strings
    assert "metrics.summary.max" in ok[0] and "provenance.versions.torch" in ok[0]
    # ok points ran once; failing points ran twice (one retry), and neither stopped the others
    lines = [line.split() for line in marker.read_text().splitlines()]
    assert len(lines) == 6
    assert (out / "summary.html").is_file()
    # No --formats (auto): summary.png exactly where static export works, a warning elsewhere
    if static_export_problem() is None:
        assert (out / "summary.png").stat().st_size > 1000
    else:
        assert not (out / "summary.png").exists()
        assert "summary.png not written" in proc.stderr


@pytest.mark.slow
def test_two_sweeps_into_one_folder_never_run_a_point_twice(tmp_path):
    grid, marker = grid_file(tmp_path, "n: [2, 3, 4, 5]\n", sleep=1.0)
    out = tmp_path / "sweep"
    args = cli("sweep", "toy", "--grid", str(grid), "--out", str(out), "--workers", "1")
    args += ["--formats", "html"]
    procs = [
        subprocess.Popen(
            args, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=400) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert executions(marker) == {"2": 1, "3": 1, "4": 1, "5": 1}
    assert len(table(out)) == 4
    # the summary follows --formats: HTML only
    assert (out / "summary.html").is_file() and not (out / "summary.png").exists()


def test_local_workers_share_out_the_cpus(monkeypatch):
    from workbench.runner.backends import THREAD_VARS, LocalBackend

    for name in THREAD_VARS:
        monkeypatch.delenv(name, raising=False)
    backend = LocalBackend(2)
    try:
        got = backend._pool.submit(os.getenv, "OMP_NUM_THREADS").result(timeout=120)
    finally:
        backend.close()
    assert got == str(max(1, os.cpu_count() // 2))
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # a user's setting wins
    backend = LocalBackend(2)
    try:
        assert backend._pool.submit(os.getenv, "OMP_NUM_THREADS").result(timeout=120) == "7"
    finally:
        backend.close()


def test_ray_start_is_retried_when_the_raylet_misses_its_window():
    from workbench.runner.backends import RayBackend

    class FakeRay:
        def __init__(self, failures):
            self.failures, self.inits, self.shutdowns = failures, 0, 0

        def init(self, **kwargs):
            self.inits += 1
            if self.inits <= self.failures:
                raise Exception("The current node timed out during startup. This could happen")

        def shutdown(self):
            self.shutdowns += 1

    ray = FakeRay(failures=1)
    RayBackend._start_local(ray, 2)
    assert (ray.inits, ray.shutdowns) == (2, 1)
    ray = FakeRay(failures=3)
    with pytest.raises(Exception, match="timed out during startup"):
        RayBackend._start_local(ray, 2, attempts=3)
    assert ray.inits == 3
