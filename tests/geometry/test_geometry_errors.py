"""Bad input raises a WorkbenchError whose message is one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.errors import InputError, WorkbenchError
from workbench.geometry import (
    effective_rank,
    isoscore,
    knn_entropy,
    mean_cosine,
    mev,
    partition_isotropy,
    rogue_dimensions,
    twonn,
)

FUNCTIONS = [mean_cosine, mev, isoscore, effective_rank, partition_isotropy, twonn, knn_entropy]
FUNCTIONS += [rogue_dimensions]

BAD = {
    "1-D": np.ones(5),
    "3-D": np.ones((2, 3, 4)),
    "one row": np.ones((1, 4)),
    "NaN": np.array([[1.0, np.nan], [2.0, 3.0], [4.0, 5.0]]),
    "inf": np.array([[1.0, np.inf], [2.0, 3.0], [4.0, 5.0]]),
    "strings": np.array([["a", "b"], ["c", "d"], ["e", "f"]]),
    "complex": torch.ones((3, 2), dtype=torch.complex64),
    "ragged": [[1.0, 2.0], [3.0]],
}


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_one_line_error(fn, name):
    with pytest.raises(InputError) as info:
        fn(BAD[name])
    message = str(info.value)
    assert "\n" not in message and message
    assert isinstance(info.value, WorkbenchError)


def test_messages_name_the_problem():
    with pytest.raises(InputError, match=r"shape \(5,\); a 2-D"):
        mev(np.ones(5))
    with pytest.raises(InputError, match="2 rows; at least 3"):
        twonn(np.ones((2, 4)))
    with pytest.raises(InputError, match="NaN"):
        isoscore(BAD["NaN"])
