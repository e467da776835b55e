"""Shared fixtures: offline hub, an isolated workbench cache, tiny saved models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one thread each (kernels and subprocesses
    # inherit it), so the workers do not fight over the cores. No test depends on the count.
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).parent))

import tinymodels
from support import chromium_or_skip

ARCHS = ("gpt2", "gpt_neox", "llama", "qwen2", "bert")
USER_HOME = os.environ.get("WORKBENCH_HOME")
"""The workbench cache the suite was started with (tests move ``WORKBENCH_HOME`` elsewhere)."""


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


@pytest.fixture
def forbid_model_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if any model is loaded: one fixture for every "a cache hit loads nothing".

    Replaces ``load_model`` wherever a workbench module holds it (an import at module top
    copies the name; ``from workbench import load_model`` inside a function reads the package's,
    which is replaced too), so no study can load a model by any path.
    """
    import sys

    from workbench.models import loading

    original = loading.load_model

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a model was loaded: load_model{args[:1]}")

    for name, module in list(sys.modules.items()):
        if name.startswith("workbench") and getattr(module, "load_model", None) is original:
            monkeypatch.setattr(module, "load_model", refuse)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained small tiny-lm folder with step-N checkpoints (trained once per session)."""
    from workbench.models.tiny_lm import TinyLMConfig, train_tiny_lm

    out = tmp_path_factory.mktemp("tiny-lm") / "small"
    return train_tiny_lm(TinyLMConfig(**tinymodels.SMALL_TINY_LM), out=out, progress=False)


@pytest.fixture(scope="session", autouse=True)
def _no_default_tiny_lm_training():
    """Fails a test that would train the full default tiny-lm (minutes of CPU).

    A test that needs the name ``tiny-lm`` takes the ``tiny_lm_home`` fixture instead: the
    session's one small tiny-lm, found under the default name through ``WORKBENCH_HOME``.
    """
    from workbench.models import tiny_lm

    real = tiny_lm.train_tiny_lm

    def guarded(config=None, **kwargs):
        if (config or tiny_lm.TinyLMConfig()) == tiny_lm.TinyLMConfig():
            pytest.fail("a test tried to train the full default tiny-lm; use tiny_lm_home")
        return real(config, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(tiny_lm, "train_tiny_lm", guarded)
    yield
    patch.undo()


@pytest.fixture(scope="session")
def _tiny_lm_home_dir(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workbench.cache import RECIPE_FILE
    from workbench.models import tiny_lm

    home = tmp_path_factory.mktemp("tiny-lm-home")
    target = home / "tiny-lm" / tiny_lm.default_path().name  # the name does not depend on home
    target.mkdir(parents=True)
    for child in tiny_lm_dir.iterdir():
        (target / child.name).symlink_to(child, target_is_directory=child.is_dir())
    (target / RECIPE_FILE).write_text(json.dumps(tiny_lm.recipe()))  # taken as the default's
    return home


@pytest.fixture
def tiny_lm_home(_tiny_lm_home_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``WORKBENCH_HOME`` where the name ``tiny-lm`` is the session's small tiny-lm."""
    monkeypatch.setenv("WORKBENCH_HOME", str(_tiny_lm_home_dir))
    return _tiny_lm_home_dir


@pytest.fixture
def html_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Notebook kernels started by the test write HTML figures only (``$WORKBENCH_FORMATS``).

    Static export (kaleido driving Chromium) costs seconds per figure; it is tested end to end by
    the anisotropy notebook, the runner and the gallery tests, so the other studies' notebook runs
    skip it.
    """
    monkeypatch.setenv("WORKBENCH_FORMATS", "html")


@pytest.fixture(scope="session")
def workbench_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide WORKBENCH_HOME so that tests never touch the user's cache."""
    home = tmp_path_factory.mktemp("workbench-home")
    os.environ["WORKBENCH_HOME"] = str(home)
    return home


LONG_FILES = (
    "browser/test_jupyterlab.py",
    "analyses/acmas/test_acmas_study.py",
    "runner/test_interrupts.py",
    "runner/test_sweep.py",
    "analyses/acmas/test_acmas_claims.py",
    "runner/test_replicate.py",
    "display/test_study_reprs.py",
    "analyses/concept_oscillation/test_concept_oscillation_claims.py",
    "analyses/concept_oscillation/test_concept_oscillation_study.py",
    "analyses/anisotropy/test_anisotropy_study.py",
    "browser/test_tour.py",
    "runner/test_run.py",
    "runner/test_demo_progress.py",
    "browser/test_pages.py",
    "models/test_smollm2.py",
    "test_wheel.py",
)
"""The files that take longest (20-160 s each, measured with ``--junitxml`` on 2 cores, 2026-12-07),
longest first. Under ``--dist loadfile`` each file is one unit and the workers take units in
collection order, so longest-first keeps the two busy to the end (scheduled by directory, the
JupyterLab file alone once made a four-minute tail, and later the AcMAS, interrupt and replicate
files a one-to-two-minute one with the other worker idle)."""


LAST_FILES = (
    "analyses/anisotropy/test_anisotropy_claims.py",
    "analyses/readouts/test_readouts_claims.py",
)
"""Files that need the default tiny-lm: scheduled last, so that its training (started in the
background when the session starts, see :func:`pytest_sessionstart`) has finished by then and no
worker sits waiting for it."""
_TRAINER: list[subprocess.Popen] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    """A whole-suite run starts training the default tiny-lm in the background (claims tests).

    Only the controlling process does it (not an xdist worker), and only when the claims tests
    may run: the whole suite (no paths given) or ``-m claims``, not ``-m "not slow"``.
    """
    config = session.config
    if hasattr(config, "workerinput"):
        return
    marks = config.getoption("markexpr", "") or ""
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if ("not slow" in marks or "not claims" in marks) or not (whole or "claims" in marks):
        return
    code = "from support import ensure_default_tiny_lm; ensure_default_tiny_lm()"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    _TRAINER.append(
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stops a background training that is still running (a partial run leaves no model)."""
    for proc in _TRAINER:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Moves the long files to the front and the tiny-lm claims files to the end."""

    def rank(item: pytest.Item) -> int:
        path = item.path.as_posix()
        for i, name in enumerate(LONG_FILES):
            if path.endswith("tests/" + name):
                return i
        if any(path.endswith("tests/" + name) for name in LAST_FILES):
            return len(LONG_FILES) + 1
        return len(LONG_FILES)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2 folder, in the cache the suite was started with.

    The conversion (about 15 s) is keyed by the GGUF's sha256 and happens once per machine under
    the cache's file lock, so every worker and later run shares it; tests only read it.
    """
    from workbench.models import smollm2

    previous = os.environ.get("WORKBENCH_HOME")
    _set_home(USER_HOME)
    try:
        return smollm2.ensure_smollm2()
    finally:
        _set_home(previous)


def _set_home(value: str | None) -> None:
    if value is None:
        os.environ.pop("WORKBENCH_HOME", None)
    else:
        os.environ["WORKBENCH_HOME"] = value


@pytest.fixture(scope="session")
def smollm2(smollm2_dir: Path):
    """The embedded SmolLM2 (float32, CPU), loaded once per worker; tests must not edit it."""
    from workbench import load_model

    subject = load_model(smollm2_dir, device="cpu")
    assert subject.n_layers == 30 and subject.d_model == 576
    return subject


@pytest.fixture(scope="session")
def _smollm2_home_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("smollm2-home")
    (home / "smollm2").mkdir()
    (home / "smollm2" / smollm2_dir.name).symlink_to(smollm2_dir, target_is_directory=True)
    return home


@pytest.fixture
def smollm2_home(_smollm2_home_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``WORKBENCH_HOME`` where the name ``smollm2`` loads the converted folder (no new one)."""
    monkeypatch.setenv("WORKBENCH_HOME", str(_smollm2_home_dir))
    return _smollm2_home_dir
