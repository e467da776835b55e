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
        "issue 19: at this size some claim fails on some seed 0-2 at every kernel level CI uses: "
        "'final layer not worse than early' on AVX2 seed 0 (F1 0.970 vs 1.0) and AVX-512 seeds 1 "
        "and 2 (0.992 vs 1.0; 0.848 vs 0.984: the injection's own tokens sit in the pooled "
        "context, so the first block already separates at F1 1.0), 'prototype detector F1 >= "
        "0.9' on AVX-512 seed 2 (0.897 sync, 0.800 async), and both on seed 1 under the scalar "
        "kernels with MKL's compatible path and oneDNN at SSE4.1 (CI's second pass; with ATen's "
        "scalar kernels alone every claim held)"
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
