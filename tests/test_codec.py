"""workbench.codec: result records written and read back from their dataclass fields."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from workbench.arrays import frozen
from workbench.codec import Record, decode, encode


def same_record(a, b) -> bool:
    """Two encoded records equal, with ints, floats and bools kept apart."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_record(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_record(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Inner(Record):
    name: str
    value: float


@dataclass(frozen=True, eq=False)
class Outer(Record):
    steps: tuple[int, ...]
    curve: np.ndarray
    inner: Inner
    by_name: dict[str, float]
    pairs: tuple[tuple[str, int], ...] = ()
    maybe: Inner | None = None
    note: str | None = None
    flags: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    model: object = field(default=None, metadata={"record": False})

    def __post_init__(self) -> None:
        object.__setattr__(self, "curve", frozen(self.curve))
        object.__setattr__(self, "flags", frozen(self.flags, bool))


def _outer() -> Outer:
    return Outer(
        (0, 10, 20),
        np.array([[1.5, math.nan], [np.inf, -2.0]]),
        Inner("a", math.nan),
        {"x": 1.0, "y": math.nan},
        (("p", 1), ("q", 2)),
        Inner("b", 0.25),
        None,
        np.array([True, False]),
        model=object(),
    )


def test_a_record_is_plain_json_with_non_finite_floats_as_null():
    record = _outer().to_dict()
    text = json.dumps(record, allow_nan=False)  # valid JSON: no NaN or Infinity
    assert json.loads(text) == record
    assert record["curve"] == [[1.5, None], [None, -2.0]]
    assert record["inner"] == {"name": "a", "value": None}
    assert record["pairs"] == [["p", 1], ["q", 2]] and record["note"] is None
    assert "model" not in record  # not data: left out


def test_a_record_reads_back_field_by_field():
    original = _outer()
    back = Outer.from_dict(json.loads(json.dumps(original.to_dict())))
    assert back.steps == (0, 10, 20) and isinstance(back.steps, tuple)
    assert back.curve.dtype == np.float64 and not back.curve.flags.writeable
    np.testing.assert_array_equal(back.curve, [[1.5, np.nan], [np.nan, -2.0]])  # inf was null
    assert back.inner.name == "a" and math.isnan(back.inner.value)
    assert back.by_name["x"] == 1.0 and math.isnan(back.by_name["y"])
    assert back.pairs == (("p", 1), ("q", 2)) and back.maybe == Inner("b", 0.25)
    assert back.flags.dtype == bool and back.flags.tolist() == [True, False]
    assert back.model is None
    assert same_record(back.to_dict(), original.to_dict())


def test_a_missing_field_keeps_its_default_and_types_are_kept_apart():
    back = Outer.from_dict({"steps": [1], "curve": [], "inner": {"name": "n", "value": 2},
                            "by_name": {}})  # fmt: skip
    assert back.note is None and back.pairs == () and back.inner.value == 2.0
    assert isinstance(back.inner.value, float)
    assert not same_record({"a": 1}, {"a": 1.0}) and not same_record([True], [1])
    assert decode(dict[int, float], {"3": None})[3] != 0.0
    assert encode((np.float32(0.5), np.int64(3))) == [0.5, 3]


def test_a_record_without_a_required_field_is_refused():
    with pytest.raises(TypeError):
        Inner.from_dict({"name": "x"})
