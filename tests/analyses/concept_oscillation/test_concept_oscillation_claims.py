"""The paper's claims (study.CLAIMS) on the toy at a small test size, seeds 0, 1 and 2.

CI reruns this file under ``ATEN_CPU_CAPABILITY=default`` (PyTorch's scalar kernels), so a claim
that holds only at one CPU kernel level fails here. The test size is what one core trains in
seconds: 150 steps, 100 conflicts. At that size the toy has not learned the task yet (measured
on seeds 0-2: the follow curve is nearly flat, slopes -0.19 to +0.01, its balance point far
outside the data, so no conflict is ambiguous); at the default (2,000 steps, 2,000 conflicts,
tuned lens) the follow-curve claims hold on seeds 0-9, the 1.5x ratio on 8 of them and
"controls oscillate least" on 9 (docs/replications/concept_oscillation.json). Hence the strict
xfail below.
"""

from __future__ import annotations

import pytest

from workbench.analyses import concept_oscillation as co

SEEDS = (0, 1, 2)


@pytest.mark.claims
@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason=(
        "issue 20: at the default the 1.5x ratio holds on 8 of seeds 0-9 and 'controls "
        "oscillate least' on 9 (the committed replication record); at the test size (150 "
        "steps) the toy is undertrained (flat follow curve, no ambiguous conflicts), so the "
        "ratio and the monotone curve fail too"
    ),
)
def test_every_claim_holds_on_seeds_0_to_2(tmp_path):
    failed = {}
    for seed in SEEDS:
        config = co.ConceptOscillationConfig(
            # a 150-step schedule alone (toy_target_kl=0): the default's criterion would train on
            # for thousands of steps
            n_cases=100,
            n_bootstrap=100,
            toy_steps=150,
            toy_target_kl=0,
            seed=seed,
            batch_size=128,
            device="cpu",
        )
        result = co.run(config, cache_dir=tmp_path / f"s{seed}", progress=False)
        table = result.claims()
        if not table.all_hold:
            failed[seed] = table.failed()
    assert not failed, f"claims failing by seed: {failed}"
