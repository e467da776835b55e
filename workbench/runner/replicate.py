"""``workbench replicate``: does a study's finding hold over seeds and CPU kernel levels?

One notebook run per seed (and per CPU kernel level), on the sweep's machinery, so a killed
replication resumes, runs in worker processes or on Ray, and never runs a point twice. Each run's
``results.json`` carries its study's claims (:mod:`workbench.claims`); the replication gathers them
into ``DIR/replication.json``:

- per scalar metric: mean, standard deviation, 95% interval of the mean, min and max;
- per claim: the share of runs where it holds, the summary of its margin (how far the value lies on
  the right side of the threshold) and a verdict, **robust** when it holds in at least 90% of runs
  and the mean margin's 95% interval lies on the right side of zero, **fragile** otherwise; and
  the same share per kernel level.

CPU kernel levels: PyTorch picks its vectorized kernels (scalar ``default``, ``avx2``,
``avx512``) from the CPU at import, and each rounds differently, so one seed trains slightly
different weights on different machines. ``--cpu-kernels default,avx2`` runs every seed once per
level, with ``ATEN_CPU_CAPABILITY`` set in that run's kernel and, where they apply, oneDNN's
``ONEDNN_MAX_CPU_ISA`` and MKL's ``MKL_CBWR`` capped to the same level. Levels the CPU lacks are
reported as skipped, not run. Without ``--cpu-kernels`` every run uses the CPU's own level.

Layout::

    DIR/replicate.json          the analysis and fixed parameters (a folder holds one replication)
    DIR/runs/seed-3[-avx2]/     one ``workbench run`` folder per seed (and level)
    DIR/replication.json        the summary above, with every run's claims
    DIR/replication.csv         one row per run: seed, level, kernel seen, each claim's value/holds
    DIR/replication.html, .png  each claim's margin per run with the mean's 95% interval
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.arrays import finite_or_none, plain
from workbench.claims import Claim, ClaimVerdict, summarize, verdict
from workbench.files import atomic_write_bytes
from workbench.runner.backends import PointTask, as_path
from workbench.runner.errors import ParameterError
from workbench.runner.notebooks import find_notebook
from workbench.runner.results import read_results
from workbench.runner.run import prepare
from workbench.runner.sweep import execute

log = logging.getLogger(__name__)
MARKER = "replicate.json"
REPLICATION = "replication.json"
LEVELS = ("default", "avx2", "avx512")
"""x86 CPU kernel levels of PyTorch, lowest first (``ATEN_CPU_CAPABILITY`` values)."""
LEVEL_ENV: dict[str, dict[str, str]] = {
    "default": {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_CBWR": "COMPATIBLE",
    },
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
}
"""The environment of a run at each level: ATen's kernels, oneDNN's ISA cap, MKL's code path."""
_AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
_AVX2 = ("avx2", "fma")


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``"0-9"``, ``"0,3,5"``, ``"2"`` or a mix (``"0-2,7"``), in order, no repeats.

    Raises:
        ParameterError: Not integers, a range that runs backwards, or no seed at all.
    """
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-") if not part.startswith("-") else (part, "", "")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ParameterError(
                f"--seeds {text!r}: use integers, ranges and commas, e.g. 0-9 or 0,3,5"
            ) from None
        if first < 0 or last < first:
            raise ParameterError(f"--seeds {text!r}: the range {part} holds no seed")
        seeds += [s for s in range(first, last + 1) if s not in seeds]
    if not seeds:
        raise ParameterError(f"--seeds {text!r} holds no seed; e.g. --seeds 0-9")
    return seeds


def cpu_levels() -> tuple[str, ...]:
    """The kernel levels this CPU can run, lowest first (read from its flags, not from torch).

    Torch reports the level it *uses*, which ``ATEN_CPU_CAPABILITY`` may have lowered in this
    process; the CPU's flags say what it *has*.
    """
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    if not flags:  # no /proc/cpuinfo: ask torch (as high as this process may go)
        import torch

        own = torch.backends.cpu.get_cpu_capability().lower()
        return LEVELS[: LEVELS.index(own) + 1] if own in LEVELS else ("default",)
    levels = ["default"]
    if all(f in flags for f in _AVX2):
        levels.append("avx2")
        if all(f in flags for f in _AVX512):
            levels.append("avx512")
    return tuple(levels)


def parse_kernels(text: str | None) -> tuple[list[str | None], dict[str, str]]:
    """The kernel levels to run and those skipped with why.

    Args:
        text: ``None`` (the CPU's own level only) or a comma list of ``default``, ``avx2``,
            ``avx512``.

    Returns:
        ``(levels, skipped)``: ``[None]`` for the CPU's own level, else the named levels the CPU
        has; skipped level -> reason.

    Raises:
        ParameterError: A name PyTorch does not know, or an empty list.
    """
    if text is None:
        return [None], {}
    names = [n.strip().lower() for n in str(text).split(",") if n.strip()]
    if not names:
        raise ParameterError("--cpu-kernels is empty; use a comma list of default, avx2, avx512")
    for name in names:
        if name not in LEVELS:
            raise ParameterError(
                f"--cpu-kernels {name!r} is not a PyTorch CPU kernel level; use default, avx2 "
                "or avx512"
            )
    have = cpu_levels()
    run = [n for n in dict.fromkeys(names) if n in have]
    skipped = {n: "this CPU lacks it" for n in dict.fromkeys(names) if n not in have}
    return list(run), skipped


def run_id(seed: int, level: str | None) -> str:
    """The run folder's name: ``seed-3`` or ``seed-3-avx2``."""
    return f"seed-{seed}" if level is None else f"seed-{seed}-{level}"


def run_claims(records: Sequence[Mapping[str, Any]]) -> tuple[Claim, ...]:
    """The claims the runs checked, rebuilt from their ``results.json`` (first seen by name).

    Judging what each run recorded (rather than the code's current ``CLAIMS``) keeps a
    replication honest about what ran, and works for any notebook that writes claims.
    """
    claims: dict[str, Claim] = {}
    for record in records:
        for entry in record.get("claims") or ():
            try:
                claim = Claim.from_record(entry)
            except ValueError:
                continue
            claims.setdefault(claim.name, claim)
    return tuple(claims.values())


@dataclass(frozen=True)
class Replication:
    """What ``workbench replicate`` found.

    Attributes:
        out_dir: The replication folder.
        analysis: The analysis.
        runs: Run id -> ``(seed, level)`` for every planned run.
        ran: Runs executed by this call.
        skipped: Runs already finished.
        failed: Run id -> the failure, for runs that failed every attempt.
        skipped_kernels: Level -> why it was not run.
        verdicts: Each claim over the finished runs.
        per_kernel: Level (``native`` for the CPU's own) -> claim name -> share held.
        metrics: Scalar metric -> its summary over the finished runs.
        files: The files written.
    """

    out_dir: Path
    analysis: str
    runs: dict[str, tuple[int, str | None]]
    ran: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    skipped_kernels: dict[str, str] = field(default_factory=dict)
    verdicts: tuple[ClaimVerdict, ...] = ()
    per_kernel: dict[str, dict[str, float]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    files: tuple[Path, ...] = ()

    def lines(self) -> list[str]:
        """The claims table as text lines (what the command prints)."""
        out = [
            f"{len(self.ran)} ran, {len(self.skipped)} already done, {len(self.failed)} failed",
            *(f"  failed {rid}: {msg}" for rid, msg in self.failed.items()),
            *(f"  skipped kernels {k}: {why}" for k, why in self.skipped_kernels.items()),
        ]
        for v in self.verdicts:
            ci = v.margin.ci95
            interval = "—" if ci is None else f"[{ci[0]:+.3g}, {ci[1]:+.3g}]"
            mean = "—" if v.value.mean is None else f"{v.value.mean:.4g}"
            out.append(
                f"  {v.verdict:<8} {v.held}/{v.n + v.missing} hold  mean {mean}  "
                f"margin 95% {interval}  {v.claim.name} ({v.claim.describe()})"
            )
        out += [f"  {path}" for path in self.files]
        return out


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, int | float):
            out[key] = finite_or_none(value)
        elif value is None:
            out[key] = None
    return out


def _mark(out: Path, analysis: str, fixed: Mapping[str, Any]) -> None:
    marker = out / MARKER
    record = {"analysis": analysis, "params": dict(fixed)}
    if marker.exists():
        try:
            before = json.loads(marker.read_text())
        except (OSError, ValueError):
            before = None
        if before is not None and before != json.loads(json.dumps(record, default=str)):
            raise ParameterError(
                f"{out} holds a replication of {before.get('analysis')!r} with parameters "
                f"{before.get('params')}; use another --out"
            )
    atomic_write_bytes(marker, json.dumps(record, indent=2, default=str).encode())


def replicate(
    analysis: str,
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    *,
    raw: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
    cpu_kernels: str | None = None,
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    notebooks: str | Path | None = None,
    timeout: float | None = None,
    retries: int = 1,
    formats: str | None = None,
) -> Replication:
    """Runs ``analysis`` once per seed (and kernel level), then judges its claims.

    Every parameter is checked before anything is written or run: a bad study, parameter, seed
    list or kernel name is a one-line :class:`~workbench.errors.WorkbenchError`.

    Args:
        analysis: The analysis.
        seeds: The seeds (see :func:`parse_seeds`).
        out_dir: The replication folder (rerun the same command to resume).
        raw: ``-p NAME VALUE`` texts, fixed in every run.
        params: Parsed fixed parameters (for Python callers).
        cpu_kernels: Comma list of kernel levels, or ``None`` for the CPU's own.
        backend: ``local`` or ``ray``.
        workers: Worker processes (local) or CPUs of a local Ray cluster.
        address: An existing Ray cluster.
        notebooks: Where the notebooks are (default as for ``workbench run``).
        timeout: Per-cell timeout in seconds.
        retries: Extra attempts for a run that fails.
        formats: Figure formats of every run and of the replication figure.
    """
    from workbench.figures import resolve_formats

    if not seeds:
        raise ParameterError("no seeds to replicate over; e.g. --seeds 0-9")
    given = {**(params or {}), **(raw or {})}
    if "seed" in given:
        raise ParameterError("seed is set by --seeds, not by -p")
    if formats not in (None, "auto"):
        formats = ",".join(resolve_formats(formats)[0])
    levels, skipped_kernels = parse_kernels(cpu_kernels)
    if not levels:
        raise ParameterError(
            f"this CPU has none of --cpu-kernels {cpu_kernels}; it has {', '.join(cpu_levels())}"
        )
    checked_by_seed = {}
    for seed in seeds:
        _, checked, _ = prepare(
            analysis, {**(params or {}), "seed": seed}, raw, notebooks_dir=notebooks
        )
        checked_by_seed[seed] = checked
    if "seed" not in checked_by_seed[seeds[0]]:
        raise ParameterError(f"{analysis}'s notebook has no seed parameter to replicate over")
    fixed = {k: v for k, v in checked_by_seed[seeds[0]].items() if k != "seed"}
    started = time.perf_counter()
    out = Path(out_dir).resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    _mark(out, analysis, fixed)
    nb_dir = as_path(find_notebook(analysis, notebooks).parent)
    runs: dict[str, tuple[int, str | None]] = {}
    tasks: dict[str, PointTask] = {}
    for level in levels:
        for seed in seeds:
            rid = run_id(seed, level)
            runs[rid] = (seed, level)
            env = None if level is None else dict(LEVEL_ENV[level])
            tasks[rid] = PointTask(
                rid,
                analysis,
                checked_by_seed[seed],
                str(out / "runs" / rid),
                nb_dir,
                timeout,
                formats,
                env,
            )
    ran, skipped, failed = execute(
        tasks,
        backend=backend,
        workers=workers,
        address=address,
        retries=retries,
        desc=f"replicate {analysis}",
    )
    result = dataclasses.replace(
        summarize_runs(out, analysis, runs),
        ran=tuple(ran),
        skipped=tuple(skipped),
        failed=failed,
        skipped_kernels=skipped_kernels,
    )
    files = write_replication(result, fixed, formats, wall_seconds=time.perf_counter() - started)
    return dataclasses.replace(result, files=tuple(files))


def not_evaluable(record: Mapping[str, Any], name: str) -> bool:
    """Whether a run's ``results.json`` marks claim ``name`` not evaluable (a missed criterion)."""
    return any(
        entry.get("name") == name and bool(entry.get("not_evaluable"))
        for entry in record.get("claims", [])
    )


def summarize_runs(
    out: Path, analysis: str, runs: Mapping[str, tuple[int, str | None]]
) -> Replication:
    """Reads every finished run's ``results.json`` and judges its claims over them."""
    records = {rid: read_results(out / "runs" / rid) for rid in runs}
    done = {rid: r for rid, r in records.items() if r is not None}
    claims = run_claims(list(done.values()))
    all_metrics = [r["metrics"] for r in done.values()]
    verdicts = tuple(
        verdict(c, all_metrics, [not_evaluable(r, c.name) for r in done.values()]) for c in claims
    )
    per_kernel: dict[str, dict[str, float]] = {}
    for level in dict.fromkeys(level for _, level in runs.values()):
        ids = [rid for rid in done if runs[rid][1] == level]
        if not ids:
            continue
        per_kernel[level or "native"] = {
            c.name: sum(
                c.check(done[rid]["metrics"]).holds is True and not not_evaluable(done[rid], c.name)
                for rid in ids
            )
            / len(ids)
            for c in claims
        }
    scalars = [_scalars(m) for m in all_metrics]
    names = list(dict.fromkeys(k for s in scalars for k in s))
    metrics = {k: summarize(s.get(k) for s in scalars).to_dict() for k in names}
    return Replication(
        out, analysis, dict(runs), verdicts=verdicts, per_kernel=per_kernel, metrics=metrics
    )


def _run_rows(
    rep: Replication, claims: Sequence[Claim]
) -> tuple[list[dict[str, Any]], dict[str, Mapping[str, Any]]]:
    """One row per planned run (seed, level, kernel seen, claims) and the finished runs' metrics."""
    rows, metrics = [], {}
    for rid, (seed, level) in rep.runs.items():
        record = read_results(rep.out_dir / "runs" / rid)
        row: dict[str, Any] = {
            "run": rid,
            "seed": seed,
            "cpu_kernels": level or "native",
            "ok": record is not None,
            "cpu_capability": None,
        }
        if record is not None:
            metrics[rid] = record["metrics"]
            row["cpu_capability"] = record["provenance"].get("cpu_capability")
            row["seconds"] = record["provenance"].get("seconds")
            for c in claims:
                checked = c.check(record["metrics"])
                row[f"{c.name} value"] = checked.value
                row[f"{c.name} holds"] = None if not_evaluable(record, c.name) else checked.holds
        rows.append(row)
    return rows, metrics


def write_replication(
    rep: Replication,
    fixed: Mapping[str, Any],
    formats: str | None = None,
    *,
    wall_seconds: float | None = None,
) -> list[Path]:
    """Writes ``replication.json``, ``replication.csv`` and the replication figure.

    ``replication.json``'s ``seconds`` holds ``wall`` (this invocation's wall time, ``None`` when
    summarized apart from a run; a resumed replication counts only its last invocation) and
    ``runs`` (the finished runs' own times added up: what running them one after another costs).
    """
    claims = [v.claim for v in rep.verdicts]
    rows, metrics = _run_rows(rep, claims)
    run_seconds = [r["seconds"] for r in rows if r.get("seconds") is not None]
    record = {
        "analysis": rep.analysis,
        "params": dict(fixed),
        "seeds": sorted({seed for seed, _ in rep.runs.values()}),
        "cpu_kernels": list(dict.fromkeys(level or "native" for _, level in rep.runs.values())),
        "skipped_kernels": rep.skipped_kernels,
        "robust_share": 0.9,
        "claims": [
            {**v.to_dict(), "by_kernel": {k: s[v.claim.name] for k, s in rep.per_kernel.items()}}
            for v in rep.verdicts
        ],
        "metrics": rep.metrics,
        "runs": rows,
        "failed": rep.failed,
        "seconds": {
            "wall": None if wall_seconds is None else round(wall_seconds, 1),
            "runs": round(sum(run_seconds), 1) if run_seconds else None,
        },
    }
    out = rep.out_dir
    files = [out / REPLICATION, out / "replication.csv"]
    atomic_write_bytes(files[0], json.dumps(plain(record), indent=2, allow_nan=False).encode())
    buffer = io.StringIO()
    names = list(dict.fromkeys(k for row in rows for k in row))
    writer = csv.DictWriter(buffer, fieldnames=names)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(files[1], buffer.getvalue().encode())
    if rep.verdicts:
        files += _write_figure(rep, rows, metrics, formats)
    return files


def replication_figure(
    rep: Replication, rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, Mapping[str, Any]]
) -> Any:
    """Each claim's margin per run (dots, one colour per kernel level) and its mean's interval.

    A margin is how far the claim's value lies on the right side of its threshold, so every panel
    reads the same way: right of the zero line holds, left fails.

    Args:
        rep: The replication.
        rows: One row per run (``run``, ``cpu_kernels``).
        metrics: Run id -> metrics, for the finished runs.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from workbench.figures import TWO_COLUMN, style

    verdicts = rep.verdicts
    fig = make_subplots(
        rows=len(verdicts),
        cols=1,
        subplot_titles=[f"{v.claim.name}: {v.verdict}" for v in verdicts],
        vertical_spacing=min(0.12, 0.5 / max(1, len(verdicts))),
    )
    palette = ("#0072B2", "#D55E00", "#009E73", "#CC79A7")
    levels = list(dict.fromkeys(row["cpu_kernels"] for row in rows))
    for i, v in enumerate(verdicts, start=1):
        for j, level in enumerate(levels):
            ids = [r["run"] for r in rows if r["cpu_kernels"] == level and r["run"] in metrics]
            margins = [(v.claim.check(metrics[rid]).margin, rid) for rid in ids]
            margins = [(m, rid) for m, rid in margins if m is not None]
            fig.add_trace(
                go.Scatter(
                    x=[m for m, _ in margins],
                    y=[level] * len(margins),
                    text=[rid for _, rid in margins],
                    mode="markers",
                    marker={"color": palette[j % len(palette)], "size": 9, "opacity": 0.75},
                    name=f"runs ({level})",
                    legendgroup=level,
                    showlegend=i == 1,
                ),
                row=i,
                col=1,
            )
        mean, ci = v.margin.mean, v.margin.ci95
        if ci is not None and mean is not None:
            fig.add_trace(
                go.Scatter(
                    x=[mean],
                    y=["mean"],
                    error_x={"type": "data", "array": [ci[1] - mean], "arrayminus": [mean - ci[0]]},
                    mode="markers",
                    marker={"color": "black", "symbol": "diamond", "size": 10},
                    name="mean, 95% interval",
                    legendgroup="mean",
                    showlegend=i == 1,
                ),
                row=i,
                col=1,
            )
        fig.add_vline(x=0, line_dash="dash", line_color="#6e7781", row=i, col=1)
        fig.update_xaxes(title_text=f"margin of {v.claim.describe()}", row=i, col=1)
    title = f"{rep.analysis}: claims over {len(metrics)} runs"
    return style(fig, title=title, width=TWO_COLUMN, height=150 + 190 * len(verdicts))


def _write_figure(
    rep: Replication,
    rows: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Mapping[str, Any]],
    formats: str | None,
) -> list[Path]:
    from workbench.figures import ExportError, export

    fig = replication_figure(rep, rows, metrics)
    target = rep.out_dir / "replication"
    written = list(export(fig, target, formats=("html",)))
    if formats not in (None, "auto") and "png" not in formats.split(","):
        return written
    try:
        written += export(fig, target, formats=("png",))
    except ExportError as exc:
        log.warning("replication.png not written: %s", exc)
    return written
