"""What produced a run: git commit, package versions, start time.

A leaf module (standard library only) shared by :mod:`workbench.figures`, which embeds provenance in
every exported figure, and :mod:`workbench.runner`, which completes ``results.json``. The runner
tells the notebook's kernel which run it is executing through the environment variable
:data:`PROVENANCE_ENV` (a JSON record: analysis, parameters, commit, start time);
:func:`run_record` reads it back on the kernel's side.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

PROVENANCE_ENV = "WORKBENCH_PROVENANCE"
"""Environment variable through which the kernel (and ``figures.export``) learns its run."""
PACKAGES = ("workbench", "torch", "transformers", "numpy", "plotly", "kaleido", "papermill")
"""Packages whose versions every ``results.json`` records."""


def now_iso() -> str:
    """The current time as ISO-8601 with the UTC offset."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@functools.cache
def versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (``None`` where absent) and of Python."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


@functools.cache
def git_state(root: str | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the workbench code's git repository, or ``(None, None)``."""
    where = root or str(Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=20,
        )
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def run_record() -> dict[str, object]:
    """The run this process executes for ``workbench run`` (empty outside a run).

    Returns:
        The JSON record the runner put in :data:`PROVENANCE_ENV`, or ``{"run": text}`` when the
        variable is not JSON.
    """
    text = os.environ.get(PROVENANCE_ENV)
    if not text:
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        return {"run": text}
    return record if isinstance(record, dict) else {"run": text}


NUMERICS = (
    "cpu_capability",
    "cpu_model",
    "threads",
    "interop_threads",
    "mkl",
    "onednn",
    "numerics_env",
)
"""Provenance keys that say which arithmetic produced a run's floats (see :func:`numerics`)."""
NUMERICS_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS")
"""Environment variables that change which CPU kernels (and how many threads) torch uses."""


def numerics() -> dict[str, object]:
    """What decides a run's floating-point results on this machine, beside the package versions.

    The same seed gives the same numbers only with the same CPU kernels (PyTorch's scalar, AVX2 and
    AVX-512 code round differently), thread counts and BLAS/oneDNN builds, so every run records
    them: ``cpu_capability`` (``torch.backends.cpu.get_cpu_capability()``), ``cpu_model``,
    ``threads`` and ``interop_threads`` (torch's pools), the ``mkl`` and ``onednn`` versions torch
    was built with, and the environment variables of :data:`NUMERICS_ENV` that are set. Values
    are ``None`` where torch is not installed.
    """
    out: dict[str, object] = dict.fromkeys(NUMERICS)
    out["cpu_model"] = cpu_model()
    out["numerics_env"] = {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ}
    try:
        import torch
    except ImportError:
        return out
    out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    out["threads"] = torch.get_num_threads()
    out["interop_threads"] = torch.get_num_interop_threads()
    out["mkl"], out["onednn"] = _blas_versions()
    return out


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def _blas_versions() -> tuple[str | None, str | None]:
    """The MKL and oneDNN versions torch was built with (from ``torch.__config__.show()``)."""
    import re

    import torch

    text = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([^\s-]+)", text)
    dnn = re.search(r"(?:MKL-DNN|oneDNN) v([\d.]+)", text)
    return (mkl.group(1) if mkl else None, dnn.group(1) if dnn else None)
