"""`workbench doctor`: a table of what is here, each missing optional part with its fix."""

from __future__ import annotations

import torch

from workbench import doctor
from workbench.cli import main


def test_doctor_reports_versions_devices_and_caches(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for item in ("python", "torch", "torch devices", "transformers", "chromium", "WORKBENCH_HOME"):
        assert any(line[4:].startswith(item) for line in out.splitlines()), item
    assert f"{tmp_path} (set)" in out
    assert torch.__version__ in out and "cached tiny-lm" in out


def test_a_missing_chromium_is_named_with_its_fix(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "none"))
    assert main(["doctor"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln[4:].startswith("chromium")]
    assert line.startswith("--") and "apt-get install chromium" in line


def test_install_check_flags_a_cuda_torch_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(doctor, "nvidia_gpu_present", lambda: False)
    monkeypatch.delenv(doctor.REQUIRE_CPU_TORCH, raising=False)
    assert doctor.main(["--install-check"]) == 0
    assert "warning: " in capsys.readouterr().err
    monkeypatch.setenv(doctor.REQUIRE_CPU_TORCH, "1")
    assert doctor.main(["--install-check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "CUDA build" in err
    monkeypatch.setattr(doctor, "nvidia_gpu_present", lambda: True)
    assert doctor.main(["--install-check"]) == 0


def test_this_machine_got_the_build_it_needs():
    """Where there is no NVIDIA GPU, the pinned install must be torch's CPU build."""
    if not doctor.nvidia_gpu_present():
        assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
