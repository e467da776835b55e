"""reorder_layers against a reference model whose layer weights were permuted in its state dict."""

from __future__ import annotations

import re

import pytest
import torch
from tinymodels import N_LAYERS, VOCAB

from workbench import capture, load_model
from workbench.errors import InterventionError
from workbench.interventions import intervene, reorder_layers, skip

ARCHS = ("gpt2", "gpt_neox", "llama")


@pytest.fixture(scope="module", params=ARCHS)
def subject(request, tiny_dir):
    subject = load_model(tiny_dir(request.param), device="cpu")
    assert subject.n_layers == N_LAYERS == 3
    return subject


def ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(seed))


def logits(model, x):
    with torch.no_grad():
        return model(input_ids=x, use_cache=False).logits


def permuted_copy(subject, order):
    """Reference: a fresh model loaded from a state dict whose per-layer weights were renamed."""
    prefix = subject.family.layers
    pattern = re.compile(rf"(^|\.){re.escape(prefix)}\.(\d+)\.")
    state = subject.model.state_dict()
    renamed = {}
    for key, value in state.items():
        m = pattern.search(key)
        if m is None:
            renamed[key] = value
            continue
        source = int(m.group(2))
        position = order.index(source)  # block `source` now runs at `position`
        renamed[pattern.sub(rf"\g<1>{prefix}.{position}.", key, count=1)] = value
    model = type(subject.model)(subject.model.config).eval()
    model.load_state_dict(renamed)
    return model


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 1, 0], [1, 2, 0]])
def test_reordering_equals_a_model_with_permuted_weights(subject, order):
    x = ids()
    before = logits(subject.model, x)
    with reorder_layers(subject, order) as used:
        got = logits(subject.model, x)
    assert used == order
    torch.testing.assert_close(got, logits(permuted_copy(subject, order), x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits(subject.model, x), before, rtol=0, atol=0)  # restored
    if order != [0, 1, 2]:
        assert not torch.allclose(got, before, atol=1e-4)


def test_capture_and_skip_see_the_new_order(subject):
    texts = ["The quick brown fox jumps.", "A short one."]
    order = [2, 0, 1]
    reference = permuted_copy(subject, order)
    with reorder_layers(subject, order):
        acts = capture(subject, texts, sites="resid_post", progress=False)
        with intervene(subject, {"resid_post.1": skip()}):
            skipped = logits(subject.model, ids(1))
    from workbench.models.subject import Subject

    ref = Subject(reference, subject.tokenizer, subject.family, "reference")
    expected = capture(ref, texts, sites="resid_post", progress=False)
    for name in acts.sites:
        torch.testing.assert_close(acts[name], expected[name], rtol=1e-5, atol=1e-5)
    with intervene(ref, {"resid_post.1": skip()}):
        torch.testing.assert_close(skipped, logits(reference, ids(1)), rtol=1e-5, atol=1e-5)


def test_the_order_is_restored_after_an_exception_and_no_hook_is_left(subject):
    blocks = list(subject.model.base_model.get_submodule(subject.family.layers))
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in subject.model.modules())
    with pytest.raises(RuntimeError, match="boom"), reorder_layers(subject, [2, 1, 0]):
        raise RuntimeError("boom")
    assert list(subject.model.base_model.get_submodule(subject.family.layers)) == blocks
    after = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in subject.model.modules())
    assert after == hooks


@pytest.mark.parametrize(
    "order", [[0, 1], [0, 1, 1], [0, 1, 3], [0, 1, 2, 3], "012", [0.0, 1, 2], [True, 0, 2], 5]
)
def test_bad_orders_fail_in_one_line_before_any_change(subject, order):
    blocks = list(subject.model.base_model.get_submodule(subject.family.layers))
    with (
        pytest.raises(InterventionError, match="not a permutation") as info,
        reorder_layers(subject, order),
    ):
        pass
    assert "\n" not in str(info.value)
    assert list(subject.model.base_model.get_submodule(subject.family.layers)) == blocks
