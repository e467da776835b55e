"""The shared array/JSON helpers every result dataclass uses (workbench.arrays)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from workbench.arrays import (
    finite_list,
    finite_or_none,
    float_or_nan,
    frozen,
    frozen_or_none,
    plain,
)


def test_frozen_is_read_only_and_reads_null_as_nan():
    a = frozen([[1, None], [2.5, 3]])
    assert a.dtype == np.float64 and a.shape == (2, 2)
    assert math.isnan(a[0, 1]) and a[1, 0] == 2.5
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 9.0
    counts = frozen([3, 1, 2], np.int64)
    assert counts.dtype == np.int64 and not counts.flags.writeable
    assert frozen([]).shape == (0,)
    assert frozen_or_none(None) is None


def test_finite_or_none_is_the_one_rounding_policy():
    assert finite_or_none(None) is None
    assert finite_or_none(float("nan")) is None
    assert finite_or_none(np.float32("inf")) is None
    assert finite_or_none(np.float64(0.123456789), 4) == 0.1235
    assert finite_or_none(2) == 2.0 and isinstance(finite_or_none(2), float)
    assert finite_list(np.array([1.0, np.nan, -np.inf, 0.5])) == [1.0, None, None, 0.5]


def test_float_or_nan_inverts_finite_or_none_through_json():
    values = [0.25, float("nan"), 3.0]
    back = [float_or_nan(v) for v in json.loads(json.dumps(finite_list(values)))]
    assert back[0] == 0.25 and math.isnan(back[1]) and back[2] == 3.0
    assert float_or_nan("1.5") == 1.5


def test_plain_makes_json_ready_values():
    data = {"a": np.arange(3), "b": (np.float32(1.5), float("nan")), 3: Path("/tmp/x")}
    assert plain(data) == {"a": [0, 1, 2], "b": [1.5, None], "3": "/tmp/x"}
    json.dumps(plain(data))  # valid JSON: no NaN, no numpy types
