"""The one tiny GPT-2 builder against a GPT2LMHeadModel configured by hand."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from workbench.models.gpt2 import tiny_gpt2


@pytest.mark.parametrize("tied", [True, False])
def test_same_weights_as_a_hand_configured_gpt2(tied: bool) -> None:
    torch.manual_seed(0)
    ours = tiny_gpt2(40, 16, 24, 2, 4, tied=tied, bos_id=1, eos_id=1, pad_id=0)
    torch.manual_seed(0)
    ref = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=40,
            n_positions=16,
            n_embd=24,
            n_layer=2,
            n_head=4,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            tie_word_embeddings=tied,
            bos_token_id=1,
            eos_token_id=1,
            pad_token_id=0,
        )
    )
    mine, theirs = ours.state_dict(), ref.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    tied_now = ours.lm_head.weight.data_ptr() == ours.transformer.wte.weight.data_ptr()
    assert tied_now is tied


def test_no_dropout_so_training_mode_is_deterministic() -> None:
    torch.manual_seed(1)
    model = tiny_gpt2(30, 8, 16, 1).train()
    ids = torch.randint(0, 30, (2, 8))
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)
    assert model.config.bos_token_id is None and model.config.pad_token_id is None
