"""The AcMAS claims over seeds: a fresh toy per seed (the seed seeds its training), small study.

A finding is a claim that holds over seeds and CPU kernel levels, never one training's number
(CI reruns this file with ``ATEN_CPU_CAPABILITY=default``). Each seed trains its own toy to the
criterion (the injected behaviour learned on held-out turns), plays a small system (16 attacked
tasks, the last 8 scored; 11 calibration tasks, one per question) and checks every claim of
:data:`workbench.analyses.acmas.study.CLAIMS`.
"""

from __future__ import annotations

import pytest
import torch

from workbench.analyses import acmas
from workbench.analyses.acmas import study

SMALL = {"n_tasks": 16, "n_calib": 11}
SEEDS = (0, 1, 2)


@pytest.mark.claims
@pytest.mark.slow
@pytest.mark.xfail(
    torch.backends.cpu.get_cpu_capability() != "DEFAULT",
    strict=True,
    reason=(
        "issue 19: measured at this size, every claim holds on seeds 0-2 under the scalar "
        "kernels (ATEN_CPU_CAPABILITY=default), but not under vectorized ones: 'final layer not "
        "worse than early' fails on AVX2 seed 0 (F1 0.970 vs 1.0) and AVX-512 seeds 1 and 2 "
        "(0.992 vs 1.0; 0.848 vs 0.984: the injection's own tokens sit in the pooled context, so "
        "the first block already separates at F1 1.0), and 'prototype detector F1 >= 0.9' fails "
        "on AVX-512 seed 2 (0.897 sync, 0.800 async)"
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
