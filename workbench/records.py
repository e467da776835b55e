"""Run records, ``results.json``: what a run measured and exactly what produced it.

This is a low module (beside :mod:`workbench.provenance`): the studies write their record with
:func:`save_results` and the runner reads and completes it, so no study imports the runner.

The file has six keys: ``analysis`` (its name), ``params`` (every parameter after injection),
``metrics`` (numbers, lists of numbers or small dicts of them, named by each study's
``METRIC_KEYS``), ``figures`` (paths relative to the run folder), ``claims`` (the study's paper
effects checked on these metrics: name, value, threshold, holds; see :mod:`workbench.claims`) and
``provenance`` (model, revision, seed, the numerics that produced the floats: CPU kernel level,
CPU model, thread counts, MKL and oneDNN versions; then git commit, package versions, start time,
seconds); ``notes`` is added when a study skipped something.

A notebook calls :func:`save_results` at its end with its parameters, metrics and figure paths;
the runner (``workbench run``) then completes the ``provenance`` block with the git commit, package
versions, start time and duration. Files are written atomically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.arrays import plain
from workbench.files import atomic_write_bytes
from workbench.provenance import NUMERICS, numerics

RESULTS = "results.json"


def save_results(
    out_dir: str | Path,
    *,
    analysis: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
    figures: Sequence[str | Path] = (),
    model: str | None = None,
    revision: str | None = None,
    seed: int | None = None,
    notes: Sequence[str] = (),
    claims: Sequence[Mapping[str, Any]] = (),
    weights: Mapping[str, Any] | None = None,
    shortfalls: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Writes ``out_dir/results.json``.

    Args:
        out_dir: The run folder.
        analysis: The analysis name, e.g. ``"anisotropy"``.
        params: Every parameter of the run, after injection.
        metrics: Numbers, lists of numbers, or small dicts of them.
        figures: Figure files, stored relative to ``out_dir`` where possible.
        model: The model studied.
        revision: Its revision or checkpoint.
        seed: The seed.
        notes: What the analysis skipped or could not show, in plain words.
        claims: The study's claims checked on ``metrics`` (``ClaimTable.to_list()``).
        weights: Where the model's weights came from, when recorded (the embedded ``smollm2``:
            its GGUF's sha256 and quantisation); written as ``provenance.weights``.
        shortfalls: The trainings that missed their criterion (``Shortfall.to_dict()``),
            written as ``provenance.shortfalls`` when there are any.

    Returns:
        The path of ``results.json``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rel = []
    for fig in figures:
        path = Path(fig)
        try:
            rel.append(str(path.resolve().relative_to(out.resolve())))
        except ValueError:
            rel.append(str(path))
    record = {
        "analysis": analysis,
        "params": plain(dict(params)),
        "metrics": plain(dict(metrics)),
        "figures": rel,
        "claims": plain(list(claims)),
        "provenance": {"model": model, "revision": revision, "seed": seed, **numerics()},
    }
    if weights is not None:
        record["provenance"]["weights"] = dict(weights)
    if shortfalls:
        record["provenance"]["shortfalls"] = plain([dict(s) for s in shortfalls])
    if notes:
        record["notes"] = [str(n) for n in notes]
    target = out / RESULTS
    atomic_write_bytes(target, json.dumps(record, indent=2, allow_nan=False).encode())
    return target


REQUIRED = ("analysis", "params", "metrics", "figures", "provenance")
COMPLETE = ("git_commit", "versions", "started", "seconds")
"""Provenance keys the runner adds; a ``results.json`` without them is from an unfinished run."""


def read_results(path: str | Path, *, complete: bool = True) -> dict[str, Any] | None:
    """Reads a ``results.json`` (file or run folder); ``None`` if absent, invalid or unfinished.

    Args:
        path: ``results.json`` or the run folder holding it.
        complete: Also require the provenance the runner adds (see :data:`COMPLETE`).
    """
    target = Path(path)
    if target.is_dir():
        target = target / RESULTS
    try:
        record = json.loads(target.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or any(key not in record for key in REQUIRED):
        return None
    prov = record["provenance"]
    if not isinstance(prov, dict) or (complete and any(key not in prov for key in COMPLETE)):
        return None
    return record


def complete_provenance(
    path: str | Path, *, params: Mapping[str, Any], provenance: Mapping[str, Any]
) -> dict[str, Any]:
    """Adds the runner's parameters and provenance to a notebook's ``results.json`` (atomically).

    The notebook's own entries win for ``params`` (it may record resolved values) and for
    ``model``/``revision``/``seed``; the runner's win for everything else in ``provenance``.

    Returns:
        The completed record.
    """
    target = Path(path)
    record = json.loads(target.read_text())
    record["params"] = plain({**params, **record.get("params", {})})
    # the kernel's own model record and numerics, not the runner's
    kept = ("model", "revision", "seed", "weights", "shortfalls", *NUMERICS)
    own = {k: v for k, v in record.get("provenance", {}).items() if k in kept}
    record["provenance"] = plain(
        {"model": None, "revision": None, "seed": None, **provenance, **own}
    )
    atomic_write_bytes(target, json.dumps(record, indent=2, allow_nan=False).encode())
    return record
