"""UnitCache: keyed per-unit JSON records, atomic, recomputed when unreadable."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
