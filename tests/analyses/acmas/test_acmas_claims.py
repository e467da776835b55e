"""The AcMAS claims over seeds: a fresh toy per seed (the seed seeds its training), small study.

A finding is a claim that holds over seeds and CPU kernel levels, never one training's number
(CI reruns this file with ``ATEN_CPU_CAPABILITY=default``). Each seed trains its own toy to the
criterion (the injected behaviour learned on held-out turns), plays a small system and checks
every claim of :data:`acmas.study.CLAIMS`.
"""

from __future__ import annotations

import pytest

from workbench.analyses import acmas
from workbench.analyses.acmas import study

SMALL = {"n_tasks": 16, "n_calib": 11}


@pytest.mark.claims
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_claim_holds_on_each_seed(seed, tmp_path):
    result = acmas.run(acmas.AcmasConfig(seed=seed, **SMALL), cache_dir=tmp_path, progress=False)
    table = study.claims(result)
    assert table.all_hold, f"seed {seed}: failing claims {table.failed()}\n{table!r}"
