"""The depth-ensemble study's paper effects (``study.CLAIMS``) hold on seeds 0, 1 and 2.

Toys at test size (students of depths 1, 2, 4 for 40 steps on a pool of 1,024 inputs; the
128-layer teachers are the default's) and no model, so three seeds take seconds. CI reruns this
file with ``ATEN_CPU_CAPABILITY=default`` (scalar kernels): a claim must hold on any x86 CPU, not
in one training's numbers.
"""

from __future__ import annotations

import pytest

from workbench.analyses import depth_ensemble as de

pytestmark = [pytest.mark.claims, pytest.mark.slow]

SMALL = {
    "model": "none",
    "toy_depths": "1,2,4",
    "toy_steps": 40,
    "toy_pool": 1024,
    "bootstrap": 20,
    "device": "cpu",
}
"""The test size (the existing study test's toys, without tiny-lm)."""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_claims_hold(seed):
    config = de.DepthEnsembleConfig(**SMALL, seed=seed)
    table = de.run(config, progress=False).claims()
    assert table.all_hold, f"seed {seed}: claims failed {table.failed()}\n{table!r}"
