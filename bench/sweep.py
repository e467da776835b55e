"""Sweep benchmark: 16 tiny runs of one notebook, local 1 vs 2 workers vs Ray, papermill overhead.

Runs one notebook 16 times per backend into a temporary folder: ``--analysis toy`` (default) is the
runner tests' toy notebook (tests/runner/data/toy.ipynb, HTML figure only); ``--analysis
anisotropy`` is the real anisotropy notebook on the embedded MiniLM with tiny inputs and every
figure format. A papermill run is compared with calling the same code directly: in this process
(warm imports) and in a fresh ``python`` process (cold imports, as the kernel has). Targets:
papermill overhead over a fresh-process call < 3 s per run; 2 workers at least 1.7x faster than 1
on 2 cores.

Usage: ``python bench/sweep.py [--runs 16] [--analysis toy|anisotropy] [--notebooks DIR]
[--no-ray]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


PRESETS = {
    # the runner tests' toy notebook: n squares, an HTML figure
    "toy": ("n", 2, {"formats": ["html"]}),
    # the real anisotropy notebook on the embedded MiniLM, tiny inputs, every figure format
    "anisotropy": (
        "seed",
        0,
        {
            "model": "minilm",
            "checkpoints": "none",
            "n_texts": 8,
            "max_length": 16,
            "max_points": 100,
            "freq_texts": 8,
            "device": "cpu",
        },
    ),
}


def point(analysis: str, i: int) -> dict:
    """Parameters of run ``i``: the preset's varied parameter and its fixed ones."""
    axis, first, fixed = PRESETS[analysis]
    return {axis: first + i, **fixed}


def sweep_seconds(analysis: str, runs: int, out: Path, backend: str, workers: int) -> float:
    from workbench.runner.grid import Grid
    from workbench.runner.sweep import run_sweep

    axis, first, fixed = PRESETS[analysis]
    grid = Grid({axis: list(range(first, first + runs))}, fixed)
    t0 = time.perf_counter()
    result = run_sweep(analysis, grid, out, backend=backend, workers=workers)
    seconds = time.perf_counter() - t0
    assert len(result.ran) == runs and not result.failed, result
    return seconds


def notebook_code(notebook: Path, params: dict) -> str:
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    inject = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    body = [cells[0], inject, *cells[1:]]
    return "\n".join(line for line in "\n".join(body).splitlines() if line.strip() != "fig")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--analysis", default="toy", choices=sorted(PRESETS))
    parser.add_argument("--notebooks", default=None, help="default: where the analysis lives")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    default = ROOT / ("tests/runner/data" if args.analysis == "toy" else "notebooks")
    notebooks = Path(args.notebooks) if args.notebooks else default
    os.environ["WORKBENCH_NOTEBOOKS"] = str(notebooks)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    notebook = notebooks / f"{args.analysis}.ipynb"
    tmp = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    rows = []
    w1 = sweep_seconds(args.analysis, args.runs, tmp / "w1", "local", 1)
    w2 = sweep_seconds(args.analysis, args.runs, tmp / "w2", "local", 2)
    rows += [("local --workers 1", w1), ("local --workers 2", w2)]
    if not args.no_ray:
        rows.append(
            ("ray (2 CPUs)", sweep_seconds(args.analysis, args.runs, tmp / "ray", "ray", 2))
        )
    # direct calls of the same code: warm (in this process) and cold (a fresh interpreter each)
    warm = []
    for i in range(args.runs):
        out = tmp / "direct" / str(i)
        code = notebook_code(notebook, {"out_dir": str(out), **point(args.analysis, i)})
        t0 = time.perf_counter()
        exec(compile(code, "toy", "exec"), {})
        warm.append(time.perf_counter() - t0)
    cold = []
    for i in range(3):
        out = tmp / "cold" / str(i)
        code = notebook_code(notebook, {"out_dir": str(out), **point(args.analysis, i)})
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp)
        cold.append(time.perf_counter() - t0)
    per_run = w1 / args.runs
    warm_s, cold_s = sum(warm) / len(warm), sum(cold) / len(cold)
    print(f"{args.runs} runs of {args.analysis} ({os.cpu_count()} CPUs)")
    print(f"{'backend':<22}{'wall s':>9}{'s/run':>8}{'speed-up vs 1':>15}")
    for name, seconds in rows:
        print(f"{name:<22}{seconds:>9.1f}{seconds / args.runs:>8.2f}{w1 / seconds:>14.2f}x")
    print(f"{'direct call, warm':<22}{'':>9}{warm_s:>8.2f}")
    print(f"{'direct call, cold':<22}{'':>9}{cold_s:>8.2f}")
    print()
    print(f"{'check':<46}{'target':>10}{'measured':>10}")
    print(f"{'overhead vs cold direct call (s/run)':<46}{'< 3.0':>10}{per_run - cold_s:>10.2f}")
    print(f"{'overhead vs warm direct call (s/run)':<46}{'(info)':>10}{per_run - warm_s:>10.2f}")
    print(f"{'2 workers speed-up over 1':<46}{'>= 1.7x':>10}{w1 / w2:>9.2f}x")


if __name__ == "__main__":
    main()
