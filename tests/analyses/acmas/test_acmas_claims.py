"""The AcMAS claims over seeds: a fresh toy per seed (the seed seeds its training), small study.

A finding is a claim that holds over seeds and CPU kernel levels, never one training's number
(CI reruns this file with ``ATEN_CPU_CAPABILITY=default``). Each seed trains its own toy to the
criterion (the injected behaviour learned on held-out turns), plays a small system (16 attacked
tasks, the last 8 scored; 11 calibration tasks, one per question) and checks every claim of
:data:`workbench.analyses.acmas.study.CLAIMS`.
"""

from __future__ import annotations

import pytest

from workbench.analyses import acmas
from workbench.analyses.acmas import study

SMALL = {"n_tasks": 16, "n_calib": 11}
SEEDS = (0, 1, 2)


@pytest.mark.claims
@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason=(
        "issue 19: 'prototype detector F1 >= 0.9 (sync)' and '(async)' fail on seed 2 "
        "(F1 0.90 / 0.80, AUROC 0.98 / 0.995: some compromised messages score inside the benign "
        "range at the final layer) and 'final layer not worse than early' fails on seeds 1 and 2 "
        "(async F1 0.98 vs 1.00; 0.85 vs 0.98), measured on AVX-512"
    ),
)
def test_every_claim_holds_on_each_seed(tmp_path):
    failing = {}
    for seed in SEEDS:
        config = acmas.AcmasConfig(seed=seed, **SMALL)
        table = study.claims(acmas.run(config, cache_dir=tmp_path, progress=False))
        if not table.all_hold:
            failing[seed] = table.failed()
    assert not failing, f"failing claims by seed: {failing}"
