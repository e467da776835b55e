"""UnitCache: keyed per-unit JSON records, atomic, recomputed when unreadable."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass

import pytest

from workbench.cache import UnitCache


@dataclass(frozen=True)
class Unit:
    name: str
    value: float

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, data):
        return cls(**data)


def test_second_get_is_a_hit_and_computes_nothing(tmp_path):
    calls = []
    cache = UnitCache(tmp_path, "k1")

    def compute():
        calls.append(1)
        return Unit("a", 1.5)

    assert cache.get("step-1", compute, Unit.from_dict) == Unit("a", 1.5)
    again = UnitCache(tmp_path, "k1")
    assert again.get("step-1", compute, Unit.from_dict) == Unit("a", 1.5)
    assert len(calls) == 1 and again.hits == ["step-1"] and cache.misses == ["step-1"]
    # another key is another cache
    UnitCache(tmp_path, "k2").get("step-1", compute, Unit.from_dict)
    assert len(calls) == 2


def test_unreadable_or_old_records_are_recomputed(tmp_path):
    cache = UnitCache(tmp_path, "k")
    cache.get("u", lambda: Unit("a", 1.0), Unit.from_dict)
    path = cache.path("u")
    path.write_text("{truncated")
    assert cache.get("u", lambda: Unit("b", 2.0), Unit.from_dict) == Unit("b", 2.0)
    path.write_text('{"old_field": 1}')
    assert cache.get("u", lambda: Unit("c", 3.0), Unit.from_dict) == Unit("c", 3.0)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp files


def test_no_root_means_no_files_and_unit_names_are_safe(tmp_path):
    cache = UnitCache(None, "k")
    assert cache.get("x", lambda: Unit("a", 1.0), Unit.from_dict) == Unit("a", 1.0)
    assert cache.path("x") is None
    named = UnitCache(tmp_path, "k")
    assert named.path("../../etc/passwd").parent == tmp_path / "k"
    assert named.path("tangent resid_post.3").name == "tangent_resid_post.3.json"


# trained artifacts ------------------------------------------------------------------------------


def _train_into(log):
    def train(out):
        (out / "weights.txt").write_text("trained")
        with open(log, "a") as handle:
            handle.write(f"{out.name}\n")

    return train


def test_a_trained_artifact_is_keyed_by_its_whole_recipe(tmp_path):
    from workbench.cache import data_digest, recipe_key, trained, trained_folder

    log = tmp_path / "log"
    recipe = {"steps": 5, "seed": 0, "data": data_digest("a b", "c"), "version": 1}
    folder = trained(tmp_path / "toys", "toy", recipe, _train_into(log))
    assert folder == trained_folder(tmp_path / "toys", "toy", recipe)
    assert folder.name == f"toy-{recipe_key(recipe)}" and (folder / "weights.txt").is_file()
    assert json.loads((folder / "recipe.json").read_text()) == recipe
    assert (
        trained(tmp_path / "toys", "toy", dict(reversed(recipe.items())), _train_into(log))
        == folder
    )
    assert len(log.read_text().splitlines()) == 1  # key order is no change: a hit
    for changed in ({"steps": 6}, {"version": 2}, {"data": data_digest("a", "b c")}):
        assert trained(tmp_path / "toys", "toy", {**recipe, **changed}, _train_into(log)) != folder
    assert len(log.read_text().splitlines()) == 4
    assert data_digest("ab", "c") != data_digest("a", "bc")  # parts are length-delimited


def test_a_failed_training_leaves_nothing_and_a_folder_without_its_recipe_is_retrained(tmp_path):
    from workbench.cache import trained, trained_folder

    def fail(out):
        (out / "half.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        trained(tmp_path, "toy", {"seed": 1}, fail)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    stale = trained_folder(tmp_path, "toy", {"seed": 1})
    stale.mkdir()
    (stale / "half.txt").write_text("from a run without the cache's atomic rename")
    folder = trained(tmp_path, "toy", {"seed": 1}, _train_into(tmp_path / "log"))
    assert folder == stale and sorted(p.name for p in folder.iterdir()) == [
        "recipe.json",
        "weights.txt",
    ]


SLOW_TRAINING = """
import sys, time
from pathlib import Path
from workbench.cache import trained

def train(out):
    with open(sys.argv[2], "a") as log:
        log.write("trained\\n")
    time.sleep(1.5)
    (out / "weights.txt").write_text("w")

print(trained(Path(sys.argv[1]), "toy", {"seed": 0}, train))
"""


def test_processes_asking_at_once_share_one_training(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SLOW_TRAINING)
    log = tmp_path / "log"
    args = [sys.executable, str(script), str(tmp_path / "toys"), str(log)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(outs) == 1 and log.read_text() == "trained\n"
