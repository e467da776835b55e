"""A sweep that ends, however it ends, leaves no process behind and resumes each point once.

Each test starts a two-worker sweep of the toy notebook, waits until both workers are inside a
point (their kernels have written the marker line and sleep), records every process the sweep has
started (psutil children: the pool workers, their kernels, multiprocessing's resource tracker; or
the local Ray cluster), then SIGKILLs, SIGINTs or SIGTERMs the sweep process alone. Within 10 s
none of the recorded processes may remain. The rerun then runs each unfinished point exactly once:
the marker file holds one line per execution with the kernel's pid, so the lines written after
the signal are the resume's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import cli, cli_env, table, workbench, write_grid

psutil = pytest.importorskip("psutil")

POINTS = ["2", "3", "4"]
GONE_WITHIN = 10.0
RAY_GONE_WITHIN = 45.0
"""Ray's own agents (DashboardAgent, RuntimeEnvAgent) exit on their own schedule once their raylet
is gone: in one fresh-clone run on a loaded 2-core machine they were still up 10 s after SIGINT."""


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _lines(marker: Path) -> list[list[str]]:
    if not marker.exists():
        return []
    return [line.split() for line in marker.read_text().splitlines() if line.strip()]


def _start(tmp_path: Path, *extra: str, sleep: float = 2.0):
    marker = tmp_path / "marker.txt"
    grid = write_grid(
        tmp_path / "grid.yaml",
        f"n: [{', '.join(POINTS)}]\nfixed:\n  formats: html\n  sleep: {sleep}\n"
        f"  marker: {marker}\n",
    )
    out = tmp_path / "sweep"
    args = ["sweep", "toy", "--grid", str(grid), "--out", str(out), "--workers", "2"]
    args += ["--formats", "html", *extra]
    proc = subprocess.Popen(
        cli(*args),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: a signal to the test never reaches it
    )
    return proc, args, out, marker


def _wait_inside_points(proc: subprocess.Popen, marker: Path, timeout: float = 300.0) -> None:
    """Waits until two kernels have started a point (two marker lines): both workers are busy."""
    deadline = time.monotonic() + timeout
    while len(_lines(marker)) < 2:
        if proc.poll() is not None:
            _, stderr = proc.communicate()
            if "timed out during startup" in stderr:  # Ray's fixed 30 s window, on a busy machine
                pytest.skip("Ray's local cluster did not start in time on this machine")
            pytest.fail(f"the sweep ended early: {stderr}")
        assert time.monotonic() < deadline, "no two points started in time"
        time.sleep(0.1)


def _finished(out: Path) -> set[str]:
    """The points with a complete results.json, by n."""
    import json

    done = set()
    for path in out.glob("runs/*/results.json"):
        record = json.loads(path.read_text())
        if "provenance" in record and "seconds" in record["provenance"]:
            done.add(str(record["params"]["n"]))
    return done


def _kill_and_check(proc, marker, out, sig, within=GONE_WITHIN) -> tuple[set[str], int, str]:
    """Sends ``sig`` to the sweep; checks that all it started is gone within 10 s."""
    started = psutil.Process(proc.pid).children(recursive=True)
    kernels = {int(line[2]) for line in _lines(marker)}
    assert len(started) >= 4, started  # resource tracker, two workers, at least one kernel
    assert kernels & {p.pid for p in started}, "no running kernel among the sweep's processes"
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"the sweep did not exit after {signal.Signals(sig).name}")
    deadline = t0 + within
    while any(_running(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in started if _running(p)]
    for p in left:  # leave nothing behind even when failing
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not left, f"still running {within} s after {signal.Signals(sig).name}: {left}"
    unfinished = set(POINTS) - _finished(out)
    assert unfinished, "every point finished before the signal: nothing was interrupted"
    return unfinished, proc.returncode, stderr


def _resume_runs_each_unfinished_point_once(args, out, marker, unfinished) -> None:
    before = len(_lines(marker))
    resumed = workbench(*args)
    if resumed.returncode != 0 and "timed out during startup" in resumed.stderr:
        pytest.skip("Ray's local cluster did not start in time on this machine (resume)")
    assert resumed.returncode == 0, resumed.stderr
    done = len(POINTS) - len(unfinished)
    assert f"{len(unfinished)} ran, {done} already done, 0 failed" in resumed.stdout
    after = [line[0] for line in _lines(marker)[before:]]
    assert sorted(after) == sorted(unfinished)  # each unfinished point once, no finished one
    assert _finished(out) == set(POINTS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: signal.Signals(s).name
)
def test_stopped_sweep_leaves_no_process_and_resumes_each_point_once(tmp_path, sig):
    proc, args, out, marker = _start(tmp_path)
    t0 = time.monotonic()
    try:
        _wait_inside_points(proc, marker)
        t1 = time.monotonic()
        unfinished, code, stderr = _kill_and_check(proc, marker, out, sig)
        t2 = time.monotonic()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:
        assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("interrupted: rerun the same command to resume: workbench sweep")
        assert f"--out {out}" in last and "Traceback" not in stderr
        # nothing half-done: no table, no failure recorded for an interrupted point
        assert not (out / "results.csv").exists() and not list(out.glob("runs/*/failure.json"))
    _resume_runs_each_unfinished_point_once(args, out, marker, unfinished)
    print(f"start {t1 - t0:.1f} s, stop {t2 - t1:.1f} s, resume {time.monotonic() - t2:.1f} s")


@pytest.mark.slow
def test_interrupted_ray_sweep_stops_its_local_cluster(tmp_path):
    """The suite's one Ray test: a sweep on a real local cluster, interrupted, then resumed on
    a new cluster, which runs each unfinished point once and tabulates every point."""
    pytest.importorskip("ray")
    proc, args, out, marker = _start(tmp_path, "--backend", "ray", sleep=6.0)
    try:
        _wait_inside_points(proc, marker)
        unfinished, code, stderr = _kill_and_check(
            proc, marker, out, signal.SIGINT, within=RAY_GONE_WITHIN
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: rerun the same command")
    _resume_runs_each_unfinished_point_once(args, out, marker, unfinished)
    assert len(table(out)) == len(POINTS)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT])  # SIGTERM: the sweep tests; one handler for both
def test_interrupted_run_stops_its_kernel(tmp_path, sig):
    marker = tmp_path / "marker.txt"
    args = ["run", "toy", "--out", str(tmp_path / "run"), "--formats", "html"]
    args += ["-p", "sleep", "30", "-p", "marker", str(marker)]
    proc = subprocess.Popen(
        cli(*args), env=cli_env(), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not _lines(marker):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert int(_lines(marker)[0][2]) in {p.pid for p in started}
        os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert (
        stderr.strip()
        .splitlines()[-1]
        .startswith("interrupted: rerun the same command to start again: workbench run toy")
    )
    assert "Traceback" not in stderr
    assert not any(_running(p) for p in started)
    assert not (tmp_path / "run" / "results.json").exists()
    assert not (tmp_path / "run" / "failure.json").exists()


# -- the pieces, without notebooks -----------------------------------------------------------


def test_a_signal_becomes_interrupted_once_and_stops_what_was_registered():
    from workbench.runner.lifecycle import Interrupted, interrupts, on_interrupt

    before = signal.getsignal(signal.SIGTERM)
    stopped = []
    with interrupts(), on_interrupt(lambda: stopped.append("kernel")):
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        os.kill(os.getpid(), signal.SIGINT)  # a second signal while stopping: ignored
        time.sleep(0.05)
    assert (info.value.exit_code, stopped) == (143, ["kernel"])
    assert isinstance(info.value, KeyboardInterrupt)  # never taken for a run's failure
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_interrupted_line_names_the_command_to_rerun():
    from workbench.cli import interrupted_line

    line = interrupted_line("sweep", ["sweep", "toy", "--grid", "my grid.yaml", "--out", "s"])
    assert line == (
        "interrupted: rerun the same command to resume: "
        "workbench sweep toy --grid 'my grid.yaml' --out s"
    )
    assert "to start again: workbench run toy" in interrupted_line("run", ["run", "toy"])


TREE = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf to SIGTERM: only SIGKILL ends it
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_stop_processes_ends_a_kernel_and_its_group():
    from workbench.runner.lifecycle import descendants, stop_processes

    leader = subprocess.Popen(
        [sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert leader.stdout.readline().strip() == "ready"
        assert leader.pid in descendants()
        tree = [psutil.Process(leader.pid), *psutil.Process(leader.pid).children(recursive=True)]
        assert len(tree) == 2
        assert stop_processes([leader.pid], grace=0.5) == []
        leader.wait(5)
        deadline = time.monotonic() + 5
        while any(_running(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_running(p) for p in tree)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)


PARENT = """
import multiprocessing, os, sys, time
from workbench.runner import lifecycle
from workbench.runner.backends import LocalBackend

backend = LocalBackend(1)
backend._pool.submit(os.getpid).result(timeout=120)  # the worker is up
if sys.argv[1] == "poll":  # a process watching by polling alone (no prctl), as on macOS
    spawn = multiprocessing.get_context("spawn")
    spawn.Process(target=lifecycle._watch, args=(os.getpid(),)).start()
    time.sleep(1.0)
backend._pool.submit(time.sleep, 60)  # the worker is busy
print(*lifecycle.descendants(), flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("watch", ["pdeathsig", "poll"])
def test_workers_and_the_resource_tracker_end_with_their_parent(watch):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, watch],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the tracker's note on the semaphores it cleaned up
        text=True,
        env=cli_env(),
        start_new_session=True,
    )
    try:
        started = [psutil.Process(int(p)) for p in parent.stdout.readline().split()]
        assert len(started) == (3 if watch == "poll" else 2)  # + the resource tracker
        parent.kill()
        parent.wait(5)
        deadline = time.monotonic() + GONE_WITHIN
        while any(_running(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in started if _running(p)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
