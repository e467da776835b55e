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

SMALL = {"n_tasks": 16, "n_calib": 11}
SEEDS = (0, 1, 2)


@pytest.mark.claims
@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason=(
        "issue 19: at this size (8 scored tasks) some claim fails on some seed 0-2 at every "
        "kernel level (measured 2026-12-07 with the last-token alarm): 'final layer not worse "
        "than early' on seeds 0 and 1 on AVX-512 (early 1.0, final 0.985 and 0.984), on seed 0 "
        "under AVX2 (1.0 against 0.992) and on seed 1 under the scalar kernels with MKL's "
        "compatible path and oneDNN at SSE4.1 (CI's second pass; 1.0 against 0.959); "
        "'steering completes more tasks than isolation' on seed 0 under AVX2 and the scalar "
        "kernels. The first block already separates (the injection's own tokens sit in the "
        "pooled turn), so 'final not worse than early' compares two F1s near 1.0; at the "
        "default size over seeds 0-9 every other claim is robust (docs/studies/acmas.md)"
    ),
)
def test_every_claim_holds_on_each_seed(tmp_path):
    failing = {}
    for seed in SEEDS:
        config = acmas.AcmasConfig(seed=seed, **SMALL)
        table = acmas.run(config, cache_dir=tmp_path, progress=False).claims()
        if not table.all_hold:
            failing[seed] = table.failed()
    assert not failing, f"failing claims by seed: {failing}"
