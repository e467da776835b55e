"""The one tiny GPT-2 builder: every model the workbench trains itself (tiny-lm and the toys).

The embedded ``tiny-lm``, the geometric-memory transformer, the concept-oscillation toy and the
AcMAS toy are all ``GPT2LMHeadModel``s without dropout (training is deterministic given the
seed and the thread count); they differ only in shape, tying and special-token ids, which are
this function's arguments. Random initialization draws from torch's global generator, so call
it after seeding (``workbench.train`` seeds before it calls a model factory).
"""

from __future__ import annotations

from typing import Any


def tiny_gpt2(
    vocab_size: int,
    n_positions: int,
    d_model: int,
    n_layers: int,
    n_heads: int = 1,
    *,
    tied: bool = True,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pad_id: int | None = None,
) -> Any:
    """A random-init ``GPT2LMHeadModel`` with no dropout.

    Args:
        vocab_size: Tokens.
        n_positions: Longest sequence.
        d_model: Residual width.
        n_layers: Blocks.
        n_heads: Attention heads per block.
        tied: Tie the input and output embeddings.
        bos_id: Beginning-of-sequence token id (``None``: none).
        eos_id: End-of-sequence token id.
        pad_id: Padding token id.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=d_model,
        n_layer=n_layers,
        n_head=n_heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=tied,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    return GPT2LMHeadModel(config)
