"""Replication benchmark: a ten-seed `workbench replicate` (2 workers) against ten single runs.

For each study, times a ten-seed replication with two workers and the same ten runs one after
another (``--workers 1``: ten sequential ``workbench run``s through the same engine), each into a
fresh folder with a fresh ``WORKBENCH_HOME`` so every toy or tiny-lm is trained as a new user's
would be, and prints the wall times, their ratio, and each claim's verdict. Target: every study's
ten-seed replication within 15 minutes on 2 cores.

Usage: ``python bench/replicate.py [--studies acmas,readouts] [--seeds 0-9] [--workers 2]
[--no-sequential] [-p STUDY:NAME=VALUE]...``

``--from DIR [DIR ...]`` reads finished replication folders instead of running anything: each
``replication.json`` records its wall time and its runs' own times (``seconds``), whose sum is
what the runs cost one after another, so the ratio comes from the same replication (on a loaded
machine both include the load; a fresh ``WORKBENCH_HOME`` is not implied).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.analyses import ANALYSES

TARGET_S = 15 * 60


def replicate(study: str, seeds: str, workers: int, out: Path, params: list[str]) -> float:
    """Wall seconds of one ``workbench replicate`` in a fresh cache."""
    env = {**os.environ, "WORKBENCH_HOME": str(out / "home"), "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-m", "workbench.cli", "replicate", study, "--seeds", seeds]
    args += ["--workers", str(workers), "--formats", "html", "--out", str(out / "rep"), *params]
    t0 = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{study} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return seconds


def from_folders(folders: list[str]) -> None:
    """Prints wall time, summed run time, their ratio and the verdicts of finished replications."""
    print(f"{'replication':<34}{'runs':>5}{'wall s':>9}{'runs s':>9}{'ratio':>7}  verdicts")
    for folder in folders:
        rep = json.loads((Path(folder) / "replication.json").read_text())
        seconds = rep.get("seconds") or {}
        wall, runs = seconds.get("wall"), seconds.get("runs")
        ratio = "—" if not wall or not runs else f"{runs / wall:.2f}"
        verdicts = ", ".join(f"{c['verdict']} {c['held']}/{c['runs']}" for c in rep["claims"])
        flag = "" if wall is None or wall <= TARGET_S else "  (over the 15-minute target)"
        name = f"{rep['analysis']} {Path(folder).name}"[:33]
        print(
            f"{name:<34}{len(rep['runs']):>5}{wall or 0:>9.0f}{runs or 0:>9.0f}{ratio:>7}  "
            f"{verdicts}{flag}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", default=",".join(ANALYSES))
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-sequential", action="store_true", help="skip the one-worker run")
    parser.add_argument("-p", action="append", default=[], help="STUDY:NAME=VALUE")
    parser.add_argument("--from", dest="folders", nargs="+", help="finished replication folders")
    args = parser.parse_args()
    if args.folders:
        from_folders(args.folders)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-replicate-"))
    print(f"workbench replicate --seeds {args.seeds}, {os.cpu_count()} CPUs, in {tmp}")
    print(f"{'study':<22}{'workers':>8}{'wall s':>9}{'1 worker s':>12}{'ratio':>7}  verdicts")
    for study in args.studies.split(","):
        params = []
        for spec in args.p:
            name, _, rest = spec.partition(":")
            if name == study:
                key, _, value = rest.partition("=")
                params += ["-p", key, value]
        par = replicate(study, args.seeds, args.workers, tmp / study / "par", params)
        seq = None
        if not args.no_sequential:
            seq = replicate(study, args.seeds, 1, tmp / study / "seq", params)
        rep = json.loads((tmp / study / "par" / "rep" / "replication.json").read_text())
        verdicts = ", ".join(f"{c['verdict']} {c['held']}/{c['runs']}" for c in rep["claims"])
        flag = "" if par <= TARGET_S else "  (over the 15-minute target)"
        seq_text = "—" if seq is None else f"{seq:.0f}"
        ratio = "—" if seq is None else f"{seq / par:.2f}"
        print(f"{study:<22}{args.workers:>8}{par:>9.0f}{seq_text:>12}{ratio:>7}  {verdicts}{flag}")


if __name__ == "__main__":
    main()
