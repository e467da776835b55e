"""The readouts study's paper claims (``CLAIMS``) on the default tiny-lm at test size, seeds 0-2.

The model is the embedded ``tiny-lm`` itself (the session's small tiny-lm, 50 steps at width
32, has barely left the unigram stage: its probe is near chance and steering moves nothing), with
the settings a model this small affords: the source's first texts, the paper's KL-trained tuned
lens from the identity, every lens position, the three lenses. Only the study is shrunk: fewer
texts, a shorter tuned-lens training, one probe repetition, four random vectors. CI reruns this
file under PyTorch's scalar kernels (``ATEN_CPU_CAPABILITY=default``).

A study seed changes the tuned lens, the probe's folds and control labels and the random
vectors; the logit and last-block lens curves do not depend on it, so they are computed once.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support import ensure_default_tiny_lm

from workbench.analyses import readouts as ro
from workbench.analyses.readouts import collect

# the first use on a machine trains the default tiny-lm (about 5 CPU-minutes on an idle core)
pytestmark = [pytest.mark.claims, pytest.mark.slow, pytest.mark.timeout(1800)]

SEEDS = (0, 1, 2)
CONFIG = ro.ReadoutsConfig(
    model="tiny-lm",
    text_sampling="first",
    n_texts=48,
    tuned_texts=96,
    tuned_init="identity",
    tuned_steps=100,
    max_length=32,
    lens="logit,last_block,tuned",
    lens_rows=None,
    probe_cv=3,
    probe_seeds=1,
    steer_scale=4.0,
    steer_random=4,
    steer_texts=48,
    steer_new_tokens=16,
    device="cpu",
)


@pytest.fixture(scope="module")
def default_tiny_lm() -> Path:
    return ensure_default_tiny_lm()


@pytest.fixture(scope="module")
def shared_curves():
    """The seed-independent lens curves (logit, last block), computed once for every seed."""
    curves = {}
    lens_curve = collect.lens_curve

    def cached(subject, lens, held, held_acts, config, tuned):
        if lens == "tuned":
            return lens_curve(subject, lens, held, held_acts, config, tuned)
        if lens not in curves:
            curves[lens] = lens_curve(subject, lens, held, held_acts, config, tuned)
        return curves[lens]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collect, "lens_curve", cached)
        yield


@pytest.mark.parametrize("seed", SEEDS)
def test_the_paper_claims_hold(seed, default_tiny_lm, shared_curves):
    result = ro.run(replace(CONFIG, seed=seed))
    table = result.claims()
    assert len(table) == len(ro.CLAIMS)
    assert table.all_hold, f"seed {seed}: {table.failed()} fail\n{table!r}"
