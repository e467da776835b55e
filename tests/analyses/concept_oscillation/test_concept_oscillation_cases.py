"""Conflict cases: the JSONL format, the shipped file, the toy task, answer tokens, bad input."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import torch

from workbench.analyses import concept_oscillation as co
from workbench.analyses.concept_oscillation import cases as cs
from workbench.analyses.concept_oscillation import collect, toy
from workbench.analyses.concept_oscillation.train_toy import build_model, tokenizer
from workbench.errors import ConfigError, WorkbenchError


def test_the_shipped_cases_parse():
    cases = co.read_cases(co.BUILTIN)
    conflicts = [c for c in cases if not c.control]
    assert len(conflicts) == 50 and sum(c.control for c in cases) == 10
    assert len({c.id for c in cases}) == len(cases)
    for case in cases:
        assert case.source_a.strip() and case.source_b == ""
        assert case.answer_a != case.answer_b
    for case in conflicts:  # the context states its answer: it contradicts the common fact
        words = re.findall(r"\w+", case.source_a)
        assert case.answer_a.split()[0] in words and case.answer_b.split()[0] not in words
    split = cs.split_cases(cases, 400, "builtin")
    assert len(split.conflicts) == 50 and len(split.controls) == 10 and not split.derived_controls


def test_cases_round_trip_through_jsonl(tmp_path):
    control = co.ConflictCase("a", "text", "Q?", "x", "y", id="v", control=True)
    cases = [*co.read_cases(co.BUILTIN)[:3], control]
    path = co.write_cases(cases, tmp_path / "out.jsonl")
    assert co.read_cases(path) == cases
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {*cs.FIELDS, "id"}  # optional fields only when set


def test_an_image_source_is_refused_in_one_line(tmp_path):
    line = {"source_a": "<image>", "source_b": "", "question": "Colour?", "answer_a": "red",
            "answer_b": "blue", "image": "pics/a.png"}  # fmt: skip
    (tmp_path / "c.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(co.CasesError, match=r"c\.jsonl line 1: field 'image' is not read"):
        co.read_cases(tmp_path / "c.jsonl")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"source_a": "a", "source_b": "", "question": "q", "answer_a": "x"},
         "line 2: missing field 'answer_b'"),
        ({"source_a": "a", "source_b": 3, "question": "q", "answer_a": "x", "answer_b": "y"},
         "line 2: field 'source_b' must be a string"),
        ({"source_a": "a", "source_b": "", "question": " ", "answer_a": "x", "answer_b": "y"},
         "line 2: field 'question' is empty"),
        ({"source_a": "a", "source_b": "", "question": "q", "answer_a": "x", "answer_b": "x "},
         "line 2: answer_a and answer_b are both 'x'"),
        ({"source_a": "a", "source_b": "", "question": "q", "answer_a": "x", "answer_b": "y",
          "control": "yes"}, "line 2: field 'control' must be true or false"),
        ([1, 2], "line 2: expected a JSON object"),
    ],
)  # fmt: skip
def test_a_bad_line_is_named(tmp_path, line, message):
    good = {"source_a": "a", "source_b": "", "question": "q", "answer_a": "x", "answer_b": "y"}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(co.CasesError, match=re.escape(message)) as info:
        co.read_cases(path)
    assert "\n" not in str(info.value) and isinstance(info.value, WorkbenchError)


def test_unreadable_and_empty_files(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"source_a": \n')
    with pytest.raises(co.CasesError, match="line 1: not valid JSON"):
        co.read_cases(tmp_path / "bad.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(co.CasesError, match="holds no cases"):
        co.read_cases(tmp_path / "empty.jsonl")
    with pytest.raises(co.CasesError, match=r"use 'builtin' or a \.jsonl file"):
        co.read_cases(tmp_path / "cases.csv")


def test_too_few_cases_for_the_bootstrap(tmp_path):
    cases = co.read_cases(co.BUILTIN)
    with pytest.raises(co.CasesError, match="needs at least 10"):
        cs.split_cases(cases[:9], 400, "mine.jsonl")
    path = co.write_cases(cases[:9], tmp_path / "few.jsonl")
    config = co.ConceptOscillationConfig(model="gpt2-never-loaded", cases=str(path))
    with pytest.raises(co.CasesError, match="has 9 conflict case"):
        co.check(config.to_params())


def test_prompts_and_derived_controls():
    case = co.ConflictCase("Ctx A.", "", "The capital is", "Lyon", "Paris", id="x")
    assert co.prompt(case, "a") == "Ctx A.\nThe capital is"
    assert co.prompt(case, "b") == "The capital is"
    assert co.prompt(case, "both") == "Ctx A.\nThe capital is"
    conflicts = [c for c in co.read_cases(co.BUILTIN) if not c.control][:6]
    controls = co.derive_controls(conflicts)
    assert len(controls) == 6 and all(c.control for c in controls)
    for case, control in zip(conflicts, controls, strict=True):
        assert control.question == case.question and control.answer_b == case.answer_b
        assert control.source_a != case.source_a and control.answer_a != case.answer_b


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_cases": 9}, "n_cases=9 is fewer cases than the follow curve's bootstrap needs"),
        ({"lens": "tuned-ish"}, "lens='tuned-ish' is not accepted"),
        ({"cases": "cases.csv"}, "use 'builtin' or a .jsonl file"),
        ({"cases": "/nonexistent/c.jsonl"}, "no such file"),
        ({"n_bootstrap": 10}, "n_bootstrap must be at least 100"),
        ({"toy_steps": 0}, "toy_steps must be an integer of at least 1"),
        ({"toy_target_kl": -0.1}, "toy_target_kl must be a number of at least 0"),
        ({"toy_target_kl": True}, "toy_target_kl must be a number of at least 0"),
        ({"toy_max_steps": 1999}, "toy_max_steps=1999 is below toy_steps=2000"),
        ({"model": " "}, "model must name a model"),
    ],
)
def test_config_errors_are_one_line(changes, message):
    with pytest.raises(ConfigError, match=message) as info:
        co.ConceptOscillationConfig(**changes)
    assert "\n" not in str(info.value)


def test_toy_cases_are_conflicts_and_irrelevant_controls():
    spec = co.ToySpec()
    cases = co.toy_cases(spec, 200, 50, seed=0)
    assert cases == co.toy_cases(spec, 200, 50, seed=0)  # seeded
    for case in cases.conflicts:
        q = case.question.split()[1]
        patches = dict(p.split("=") for p in case.source_a.split()[1:])
        assert patches[q] == case.answer_a != case.answer_b
        links = dict(link.split(">") for link in case.source_b.split()[1:])
        node = q
        for _ in range(len(links)):
            node = links.get(node, node)
        assert node == case.answer_b  # following the chain from q reaches answer B
        tier_a, tier_b = toy.tier_of(case.id)
        assert len(patches) == tier_a + 1 and tier_b in (0, 1, 2)
    for case in cases.controls:
        q = case.question.split()[1]
        assert q not in [p.split("=")[0] for p in case.source_a.split()[1:]]
        assert case.answer_a in case.source_a and case.answer_a != case.answer_b


def test_training_examples_follow_the_noise_levels():
    spec = co.ToySpec()
    ids = {t: i for i, t in enumerate(spec.vocab)}
    r = random.Random(0)
    rows = [toy.training_example(spec, r) for _ in range(4000)]
    kinds = {"a": 0, "b": 0, "both": 0, "irrelevant": 0}
    for tokens, _ in rows:
        asked = tokens[-1]
        shown = [t.split("=")[0] for t in tokens if "=" in t]
        if "[A]" in tokens and "[B]" in tokens:
            kinds["both" if asked in shown else "irrelevant"] += 1
        else:
            kinds["a" if "[A]" in tokens else "b"] += 1
    for i, kind in enumerate(kinds):
        assert kinds[kind] / 4000 == pytest.approx(spec.mix[i], abs=0.03), kind
    batch = toy.training_batch(spec, ids, 16, torch.Generator().manual_seed(0))
    again = toy.training_batch(spec, ids, 16, torch.Generator().manual_seed(0))
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert batch["input_ids"].shape[1] <= spec.max_length
    rows_ok = batch["attention_mask"].gather(1, batch["last"][:, None]).squeeze(1)
    assert rows_ok.all() and (batch["last"] == batch["attention_mask"].sum(1) - 1).all()


def test_noisy_two_source_examples_disagree_at_the_rate_the_noise_implies():
    spec = co.ToySpec()
    r = random.Random(1)
    examples = [toy.example(spec, r, "noisy") for _ in range(20000)]
    k = spec.n_colours
    # the sources agree when both show the truth, or both show the same wrong colour
    expected = np.mean(
        [1 - (1 - ea) * (1 - eb) - ea * eb / (k - 1) for ea in spec.eps_a for eb in spec.eps_b]
    )
    disagree = [ex for ex in examples if ex.a != ex.b]
    assert len(disagree) / len(examples) == pytest.approx(expected, abs=0.01)
    # a tier-0 A against a tier-2 B: A shows the truth far more often than B
    hard_b = [ex for ex in disagree if ex.tier_a == 0 and ex.tier_b == 2]
    assert np.mean([ex.a == ex.truth for ex in hard_b]) > 0.8


def test_toy_tokenizer_and_compositional_embeddings_agree_with_the_task():
    spec = co.ToySpec()
    tok = tokenizer(spec)
    case = co.toy_cases(spec, 1, 0, seed=3).conflicts[0]
    text = co.prompt(case, "both")
    ids = tok(text)["input_ids"]
    assert [spec.vocab[i] for i in ids] == text.split()
    y_a, y_b = collect.answer_tokens(tok, [case])
    assert spec.vocab[y_a[0]] == case.answer_a and spec.vocab[y_b[0]] == case.answer_b
    torch.manual_seed(0)
    model = build_model(spec)
    table = model.transformer.wte.weight
    index = {t: i for i, t in enumerate(spec.vocab)}
    expected = (table[index["e3"]] + table[index["pink"]] + table[index["[A]"]]) / 3**0.5
    torch.testing.assert_close(table[index["e3=pink"]], expected)
    assert model.config.n_layer == 6 and sum(p.numel() for p in model.parameters()) < 300_000


class _FakeTokenizer:
    """Maps characters to ids; ``~`` (a 'dropped' character) adds no token."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(ch) for ch in text if ch != "~"]}

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_answer_tokens_skip_whitespace_and_reject_empty_answers(tiny_dir):
    from transformers import AutoTokenizer

    bpe = AutoTokenizer.from_pretrained(tiny_dir("gpt2"))  # byte-level: " L" is "Ġ", "L"
    assert bpe.decode([collect.answer_token(bpe, "The capital is", "Lyon")]) == "L"
    fake = _FakeTokenizer()
    assert collect.answer_token(fake, "Q:", "Paris") == ord("P")
    with pytest.raises(co.CasesError, match="tokenizes to nothing"):
        collect.answer_token(fake, "Q:", "~~")


def test_cases_whose_answers_share_a_first_token_are_dropped_with_a_note():
    base = [c for c in co.read_cases(co.BUILTIN) if not c.control]
    same = co.ConflictCase("ctx", "", "Q", "Santiago", "Saigon", id="same-start")
    cases = cs.CaseSet(tuple([*base[:12], same]), (), "mine")
    kept, notes = collect.usable_cases(_FakeTokenizer(), cases)
    assert same not in kept.conflicts and len(kept.conflicts) == 12 - sum(
        c.answer_a[0] == c.answer_b[0] for c in base[:12]
    )
    assert "same-start" in notes[0] and "same token" in notes[0]
