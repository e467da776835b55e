"""The readouts study's pure parts: labels read off token pieces, the steering readout, config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.analyses import readouts as ro
from workbench.errors import ConfigError


@pytest.mark.parametrize(
    ("piece", "word", "cls"),
    [
        ("Ġthe", True, "letter"),
        ("▁the", True, "letter"),
        ("the", False, "letter"),
        ("Ġ42", True, "digit"),
        ("7", False, "digit"),
        ("Ġ(", True, "punct"),
        (".", False, "punct"),
        ("Ċ", True, "space"),
        ("ĠĠ", True, "space"),
        (" x", True, "letter"),
    ],
)
def test_pieces_are_classified(piece, word, cls):
    assert ro.starts_word(piece) is word
    assert ro.CHAR_CLASSES[ro.char_class(piece)] == cls


def test_word_start_labels_are_the_next_tokens_and_drop_each_texts_last_row():
    pieces = ["Ġa", "b", "Ġc", "."]
    token_ids = np.array([0, 1, 2, 3, 2, 0, 1])  # texts: [0 1 2 3] [2 0 1]
    offsets = np.array([0, 4, 7])
    keep, labels, kept_offsets = ro.probe_labels(offsets, token_ids, pieces, "word_start")
    assert keep.tolist() == [True, True, True, False, True, True, False]
    # brute force: label of row i is starts_word(next token) within its text
    expected = [ro.starts_word(pieces[token_ids[i + 1]]) for i in (0, 1, 2, 4, 5)]
    assert labels.tolist() == [int(x) for x in expected]
    assert kept_offsets.tolist() == [0, 3, 5]
    keep, labels, same = ro.probe_labels(offsets, token_ids, pieces, "char_class")
    assert keep.all() and same.tolist() == offsets.tolist()
    assert labels.tolist() == [ro.char_class(pieces[t]) for t in token_ids]


def test_word_mass_is_the_softmax_mass_on_the_mask():
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([True, False, True, False, False, True, False])
    expected = torch.softmax(logits.double(), -1)[:, mask].sum(-1)
    torch.testing.assert_close(ro.word_mass(logits, mask), expected, rtol=1e-12, atol=1e-12)


def test_random_directions_have_the_norm_and_the_seed():
    from workbench.analyses.readouts.compute import random_directions

    v = random_directions(16, 4, 2.5, seed=3)
    torch.testing.assert_close(v.norm(dim=1), torch.full((4,), 2.5), rtol=1e-5, atol=1e-6)
    assert torch.equal(v, random_directions(16, 4, 2.5, seed=3))
    assert not torch.equal(v, random_directions(16, 4, 2.5, seed=4))


def test_config_validation():
    config = ro.ReadoutsConfig.from_params({"lens": "tuned, logit", "out_dir": "x"})
    assert config.lenses == ("logit", "tuned")
    with pytest.raises(ConfigError, match="unknown lens"):
        ro.ReadoutsConfig(lens="logit,fancy")
    with pytest.raises(ConfigError, match="must include 'logit'"):
        ro.ReadoutsConfig(lens="tuned")
    with pytest.raises(ConfigError, match="probe_task='pos' is not accepted"):
        ro.ReadoutsConfig(probe_task="pos")
    with pytest.raises(ConfigError, match="probe_cv must be at least 2"):
        ro.ReadoutsConfig(probe_cv=1)
    with pytest.raises(ConfigError, match="n_texts"):
        ro.ReadoutsConfig(n_texts=0)
    assert ro.ReadoutsConfig().key() == ro.ReadoutsConfig(device="cpu", batch_size=2).key()
