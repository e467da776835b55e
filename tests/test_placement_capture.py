"""Capture sizes itself: an estimate of the activations' bytes, and no in-memory capture too big."""

from __future__ import annotations

import logging

import pytest
from tinymodels import D_MODEL, N_LAYERS, SENTENCES

from workbench import capture, load_model
from workbench import capturing as C
from workbench.devices import DeviceMemory
from workbench.errors import ConfigError


@pytest.fixture(scope="module")
def subject(tiny_dir):
    return load_model(tiny_dir("gpt2"), device="cpu")


def test_estimate_matches_what_capture_holds(subject) -> None:
    acts = capture(subject, SENTENCES, sites="resid_post", progress=False)
    n_rows = int(acts.offsets[-1])
    held = sum(t.numel() * t.element_size() for t in acts.values())
    assert held == n_rows * N_LAYERS * D_MODEL * 4
    assert C.estimate_bytes(subject, n_rows, "resid_post") == held
    assert C.estimate_bytes(subject, n_rows, "resid_post", dtype="bfloat16") == held // 2


def test_capture_logs_placement_and_size(subject, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="workbench.capturing"):
        capture(subject, SENTENCES[:2], sites="resid_post.0", progress=False)
    assert "capture on cpu" in caplog.text and "of activations" in caplog.text


def test_an_in_memory_capture_that_would_not_fit_names_out(subject, monkeypatch, tmp_path) -> None:
    tiny = [DeviceMemory("cpu", "host memory", 1000, 2000)]
    monkeypatch.setattr(C, "memory_report", lambda: tiny)
    with pytest.raises(ConfigError, match="out=") as excinfo:
        capture(subject, SENTENCES, sites="resid_post", progress=False)
    assert "\n" not in str(excinfo.value)
    store = capture(subject, SENTENCES, sites="resid_post", out=tmp_path / "acts", progress=False)
    assert store.read("resid_post.0").shape[1] == D_MODEL
