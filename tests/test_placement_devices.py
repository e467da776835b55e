"""``workbench.devices``: device names, memory sizes, execution devices, doctor's memory rows."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench import devices, doctor
from workbench.cli import main
from workbench.errors import ConfigError


def test_resolve_device_lives_in_devices_and_is_re_exported() -> None:
    from workbench.models.loading import resolve_device, resolve_dtype

    assert resolve_device is devices.resolve_device
    assert resolve_dtype is devices.resolve_dtype
    assert devices.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="unknown device"):
        devices.resolve_device("gpu7")


def test_resolve_dtype() -> None:
    assert devices.resolve_dtype(None) is torch.float32
    assert devices.resolve_dtype("bf16") is torch.bfloat16
    assert devices.resolve_dtype("torch.float16") is torch.float16
    with pytest.raises(ConfigError, match="'float17'"):
        devices.resolve_dtype("float17")


@pytest.mark.parametrize(
    ("text", "n"),
    [(100, 100), ("500MB", 500 * 10**6), ("60GiB", 60 * 2**30), ("1.5 KiB", 1536), ("2e3", 2000)],
)
def test_parse_bytes(text: int | str, n: int) -> None:
    assert devices.parse_bytes(text) == n


@pytest.mark.parametrize("bad", ["lots", "5 parsecs", 0, -3, True, 1.5, "0GB"])
def test_parse_bytes_refuses(bad: object) -> None:
    with pytest.raises(ConfigError):
        devices.parse_bytes(bad)  # type: ignore[arg-type]


def test_placement_device() -> None:
    assert devices.placement_device("cpu") == "cpu"
    assert devices.placement_device("disk") == "disk"
    with pytest.raises(ConfigError, match="'disk'"):
        devices.placement_device("disk", allow_disk=False)
    for bad in ("gpu", "xla:3", None, True):
        with pytest.raises(ConfigError, match="unknown device"):
            devices.placement_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="0 CUDA device"):
            devices.placement_device(0)
        with pytest.raises(ConfigError, match="cuda:1"):
            devices.placement_device("cuda:1")


def test_execution_device_prefers_accelerates_hook() -> None:
    class Hook:
        execution_device = "cpu"

    linear = nn.Linear(2, 2, device="meta")
    assert devices.execution_device(linear, torch.device("cpu")) == torch.device("cpu")
    linear._hf_hook = Hook()  # what accelerate sets on an offloaded module
    assert devices.execution_device(linear) == torch.device("cpu")
    plain = nn.Sequential(nn.Identity(), nn.Linear(2, 2))
    assert devices.execution_device(plain) == torch.device("cpu")


def test_format_bytes() -> None:
    assert devices.format_bytes(512) == "512 B"
    assert devices.format_bytes(3 * 2**30) == "3.0 GiB"


def test_doctor_shows_each_device_with_free_memory(capsys) -> None:
    report = devices.memory_report()
    assert report[0].device == "cpu"
    assert len(report) == 1 + (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln[4:].startswith("memory cpu")]
    assert "free of" in line
    assert next(r.item for r in doctor.memory_rows()) == "memory cpu"


def test_pinned_thread_counts_from_two_threads_never_interleave():
    """Torch's count is the process's: one pinned block at a time, each restoring what it found."""
    import threading

    import torch

    from workbench.devices import torch_threads

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    a_inside = threading.Event()
    order: list[str] = []

    def a() -> None:
        with torch_threads(1):
            order.append("a in")
            a_inside.set()
            threading.Event().wait(0.2)  # B tries to pin meanwhile
            order.append(f"a reads {torch.get_num_threads()}")
            with torch_threads(1):  # re-entrant
                pass
            order.append("a out")

    def b() -> None:
        a_inside.wait()
        with torch_threads(2):
            order.append(f"b in at {torch.get_num_threads()}")
        order.append("b out")

    try:
        workers = [threading.Thread(target=a), threading.Thread(target=b)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert order == ["a in", "a reads 1", "a out", "b in at 2", "b out"]
        assert torch.get_num_threads() == 3  # the process is back where it was
        with torch_threads(None):
            assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_one_resolve_device_for_probes_and_the_rest():
    import torch

    from workbench.devices import resolve_device
    from workbench.errors import ProbeError
    from workbench.probes._data import resolve_device as probe_device

    assert resolve_device(None) == resolve_device("auto") == probe_device(None)
    assert probe_device("cpu") == torch.device("cpu")
    with pytest.raises(ProbeError, match="unknown device 'gpu7'"):
        probe_device("gpu7")
