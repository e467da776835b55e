"""Tiny random-init models built from explicit transformers configs, saved with save_pretrained.

Shared by the tests and benchmarks. Every builder returns the folder it saved to; the models are
small enough that a forward pass takes milliseconds, and their sizes are asserted by the tests.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch
import transformers as T

VOCAB = 256
SMALL_TINY_LM = dict(steps=50, d_model=32, n_heads=2, n_layers=2, warmup=5, batch_size=8)
"""A tiny-lm small enough to train in seconds: checkpoints at steps 0, 10, 20 and 50."""
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Activations are read at every layer of the residual stream.",
    "Padding must never leak into the captured rows.",
    "A short one.",
    "Geometry of representations changes across training.",
]


@cache
def bpe_tokenizer() -> T.PreTrainedTokenizerFast:
    """A tiny byte-level BPE tokenizer (GPT-2 style, no special tokens added to texts)."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        SENTENCES * 4, vocab_size=VOCAB, min_frequency=1, special_tokens=["<eos>"]
    )
    return T.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, eos_token="<eos>", pad_token="<eos>", bos_token="<eos>"
    )


def wordpiece_tokenizer() -> T.PreTrainedTokenizerFast:
    """A tiny BERT-style tokenizer ([CLS] ... [SEP])."""
    from tokenizers import BertWordPieceTokenizer

    wp = BertWordPieceTokenizer()
    wp.train_from_iterator(SENTENCES * 4, vocab_size=VOCAB, min_frequency=1)
    return T.PreTrainedTokenizerFast(
        tokenizer_object=wp._tokenizer,
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
    )


CONFIGS = {
    "gpt2": lambda: T.GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64),
    "gpt_neox": lambda: T.GPTNeoXConfig(
        num_hidden_layers=3,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    ),
    "llama": lambda: T.LlamaConfig(
        num_hidden_layers=3,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    ),
    "qwen2": lambda: T.Qwen2Config(
        num_hidden_layers=3,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    ),
    "bert": lambda: T.BertConfig(
        num_hidden_layers=3,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    ),
}
N_LAYERS = 3
D_MODEL = 32


def build(arch: str, folder: Path, seed: int = 0) -> Path:
    """Builds a random-init ``arch`` model and its tokenizer and saves both to ``folder``."""
    torch.manual_seed(seed)
    config = CONFIGS[arch]()
    if arch == "bert":
        model = T.BertModel(config)
        tokenizer = wordpiece_tokenizer()
    else:
        model = T.AutoModelForCausalLM.from_config(config)
        tokenizer = bpe_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
