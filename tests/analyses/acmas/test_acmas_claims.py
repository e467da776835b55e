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


FRAGILE_AT_TEST_SIZE = (
    "final layer not worse than early",
    "steering completes more tasks than isolation",
)
"""Claims that fail on some seed 0-2 at this size (see the xfail below); the others must hold."""


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Each seed's claim table: a fresh toy per seed, the study at the small size."""
    cache = tmp_path_factory.mktemp("acmas-claims")
    return {
        seed: acmas.run(
            acmas.AcmasConfig(seed=seed, **SMALL), cache_dir=cache, progress=False
        ).claims()
        for seed in SEEDS
    }


@pytest.mark.claims
@pytest.mark.slow
def test_detection_claims_hold_on_each_seed(tables):
    """F1 >= 0.9 and beating the text monitor, in both schedules: every seed, every kernel level."""
    names = [c.name for c in acmas.CLAIMS if c.name not in FRAGILE_AT_TEST_SIZE]
    assert len(names) == 4
    failing = {
        seed: [r.claim.name for r in table if r.claim.name in names and r.holds is not True]
        for seed, table in tables.items()
    }
    assert not any(failing.values()), f"failing claims by seed: {failing}"


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
def test_every_claim_holds_on_each_seed(tables):
    failing = {seed: table.failed() for seed, table in tables.items() if not table.all_hold}
    assert not failing, f"failing claims by seed: {failing}"
