"""Shared fixtures: offline hub, an isolated workbench cache, tiny saved models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))

import tinymodels
from support import chromium_or_skip

ARCHS = ("gpt2", "gpt_neox", "llama", "qwen2", "bert")


@pytest.fixture
def chromium() -> str:
    """The system Chromium (the test is skipped without one, unless CI requires it)."""
    return chromium_or_skip()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """Returns a function ``arch -> folder`` of a tiny saved model (built once per session)."""
    root = tmp_path_factory.mktemp("tiny-models")
    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = tinymodels.build(arch, root / arch)
        return built[arch]

    return get


@pytest.fixture(scope="session")
def minilm():
    """The real embedded MiniLM encoder, loaded once."""
    from workbench import load_model

    return load_model("minilm", device="cpu")


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained small tiny-lm folder with step-N checkpoints (trained once per session)."""
    from workbench.models.tiny_lm import TinyLMConfig, train_tiny_lm

    out = tmp_path_factory.mktemp("tiny-lm") / "small"
    return train_tiny_lm(TinyLMConfig(**tinymodels.SMALL_TINY_LM), out=out, progress=False)


@pytest.fixture(scope="session")
def workbench_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide WORKBENCH_HOME so that tests never touch the user's cache."""
    home = tmp_path_factory.mktemp("workbench-home")
    os.environ["WORKBENCH_HOME"] = str(home)
    return home
