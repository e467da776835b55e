"""The two-channel conflict task of the embedded default (pure: no model, no disk).

A small world of objects (``e0`` ... ``e11``) with colours (``red`` ... ``plum``). A prompt holds
up to two sources and a question, ``[Q] e6``, whose answer is a colour:

* **Channel A, the "image": a lookup among distractors.** ``[A] e6=pink e9=gold e7=gray``: a set
  of object-colour *patches*, one per token (an image encoder's patch binds an object and its
  attribute). The asked object's patch gives the answer; difficulty tier ``t`` adds ``t``
  distractor patches (0 to 3).
* **Channel B, the "text": a multi-hop chain.** ``[B] e6>e2 e4>blue e2>pink``: relations, one per
  token, shuffled; following the asked object's chain for ``h`` hops (1 to 3, the tier) reaches
  the answer. A distractor chain of one or two hops that starts elsewhere and ends in another
  colour is always there, so "copy the only colour" does not work.

**Where uncertainty comes from.** Harder inputs are less reliable: in single-source training
examples the label is the source's answer except, with a probability that grows with the tier
(:attr:`ToySpec.eps_a`, :attr:`ToySpec.eps_b`), a uniformly random colour (a cluttered image or a
long chain is misread more often). A model that fits this data is uncertain in proportion to the
difficulty of what it sees, so its single-source entropies ``H_a`` and ``H_b`` vary over cases.

**Training and evaluation.** The decoder is trained on single-source examples (each channel
alone) and on two-source examples of the same noisy world: the label is the true answer and each
channel shows it, except that with its tier's probability (the same ``eps``) it shows another
colour, so the two channels disagree in about 9% of training examples and the label then
sides with the more reliable one more often; a tenth of the examples have an irrelevant
channel A (only other objects' patches) and B's label, so that "a patch of another object is no
evidence" is part of the task, as it is for a real model and an irrelevant image. (Without them
the evaluation's controls were out of distribution and how much they oscillated was left to the
training: one of six seeds had controls oscillating twice as often as clear conflicts.) (Our
first default, trained on single-source and
*consistent* two-source examples only, never learned to weigh the channels: it followed the
easy lookup A in 400 of 400 conflicts whatever the tiers, so there was no follow curve.) It is
evaluated on conflicts (the two channels answer differently, drawn evenly over the tiers, unlike
training where disagreement is rare and mostly at hard tiers) and on controls (channel A shows
only other objects, so it is irrelevant to the question). Which source it follows in a conflict
is what its own uncertainty about each channel, learned from the data, makes it do.

Token embeddings start *compositional*: a patch ``e6=pink`` or relation ``e6>e2`` starts as the
scaled sum of its parts' embeddings (and its channel marker's), as an encoder's features would
be. Without this the tiny decoder must discover each of the several hundred compound tokens'
parts separately and does not learn the lookups in the default's training budget.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from workbench.analyses.concept_oscillation.cases import CaseSet, ConflictCase

SPECIAL = ("<pad>", "<unk>", "[A]", "[B]", "[Q]")
PAD, UNK = "<pad>", "<unk>"
COLOURS = ("red", "blue", "green", "gold", "pink", "gray", "teal", "plum")


@dataclass(frozen=True)
class ToySpec:
    """The task's world and noise levels.

    Attributes:
        n_objects: Objects (entities) in the world.
        n_colours: Colours (answers), at most 8.
        eps_a: Label noise of channel A by tier (number of distractor patches).
        eps_b: Label noise of channel B by tier (hops minus one).
        mix: Shares of A-alone, B-alone, two-source (noisy) and two-source training examples
            whose channel A is irrelevant (shows only other objects; the label is B's).
    """

    n_objects: int = 12
    n_colours: int = 8
    eps_a: tuple[float, ...] = (0.02, 0.1, 0.22, 0.38)
    eps_b: tuple[float, ...] = (0.04, 0.14, 0.3)
    mix: tuple[float, float, float, float] = (0.3, 0.3, 0.3, 0.1)
    objects: tuple[str, ...] = field(init=False, repr=False)
    colours: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "objects", tuple(f"e{i}" for i in range(self.n_objects)))
        object.__setattr__(self, "colours", COLOURS[: self.n_colours])

    @property
    def vocab(self) -> list[str]:
        """Every token, in id order: specials, objects, colours, patches, relations."""
        objs, cols = self.objects, self.colours
        patches = [f"{o}={c}" for o in objs for c in cols]
        links = [f"{x}>{y}" for x in objs for y in (*objs, *cols) if x != y]
        return [*SPECIAL, *objs, *cols, *patches, *links]

    @property
    def max_length(self) -> int:
        """Tokens of the longest prompt: both sources at their hardest, and the question."""
        a = 1 + len(self.eps_a)
        b = 1 + len(self.eps_b) + 2
        return a + b + 2


@dataclass(frozen=True)
class Example:
    """One generated example: its sources, question and the answer each source gives."""

    q: int
    a: int
    b: int
    tier_a: int
    tier_b: int
    source_a: tuple[str, ...]
    source_b: tuple[str, ...]
    question: tuple[str, ...]
    answer_a_irrelevant: bool = False
    truth: int | None = None


def _source_a(spec: ToySpec, r: random.Random, q: int, a: int, tier: int, relevant: bool):
    pool = [o for o in range(spec.n_objects) if o != q]
    shown = r.sample(pool, tier + (0 if relevant else 1))
    patches = [(o, r.randrange(spec.n_colours)) for o in shown]
    if relevant:
        patches.append((q, a))
    r.shuffle(patches)
    tokens = ("[A]", *(f"{spec.objects[o]}={spec.colours[c]}" for o, c in patches))
    return tokens, patches


def _chain(spec: ToySpec, r: random.Random, start: int, hops: int, end: int, avoid: set[int]):
    pool = [o for o in range(spec.n_objects) if o != start and o not in avoid]
    mids = r.sample(pool, hops - 1)
    nodes = [spec.objects[start], *(spec.objects[m] for m in mids)]
    links = [f"{nodes[i]}>{nodes[i + 1]}" for i in range(hops - 1)]
    return [*links, f"{nodes[-1]}>{spec.colours[end]}"], mids


def _source_b(spec: ToySpec, r: random.Random, q: int, b: int, tier: int) -> tuple[str, ...]:
    links, mids = _chain(spec, r, q, tier + 1, b, set())
    used = {q, *mids}
    start = r.choice([o for o in range(spec.n_objects) if o not in used])
    other = r.choice([c for c in range(spec.n_colours) if c != b])
    decoy, _ = _chain(spec, r, start, r.randint(1, 2), other, used)
    links += decoy
    r.shuffle(links)
    return ("[B]", *links)


def _other(spec: ToySpec, r: random.Random, colour: int) -> int:
    return (colour + r.randrange(1, spec.n_colours)) % spec.n_colours


def example(spec: ToySpec, r: random.Random, kind: str) -> Example:
    """One example of ``kind``: ``consistent``, ``noisy``, ``conflict`` or ``control``.

    ``consistent``: both sources give the same answer. ``noisy``: the world's answer is
    ``truth``; each source shows it, or with its tier's ``eps`` another colour (the sources may
    then disagree). ``conflict``: the sources give different answers. ``control``: channel A
    lacks the asked object; its ``a`` is the colour of one of its patches (a candidate answer
    that bears on another object).
    """
    q = r.randrange(spec.n_objects)
    tier_a, tier_b = r.randrange(len(spec.eps_a)), r.randrange(len(spec.eps_b))
    a = r.randrange(spec.n_colours)
    truth = None
    if kind == "noisy":
        truth = a
        a = _other(spec, r, truth) if r.random() < spec.eps_a[tier_a] else truth
        b = _other(spec, r, truth) if r.random() < spec.eps_b[tier_b] else truth
    else:
        b = a if kind == "consistent" else _other(spec, r, a)
    relevant = kind != "control"
    source_a, patches = _source_a(spec, r, q, a, tier_a, relevant)
    if not relevant:
        if all(c == b for _, c in patches):  # keep a candidate answer other than B's
            patches[0] = (patches[0][0], a)
            source_a = ("[A]", *(f"{spec.objects[o]}={spec.colours[c]}" for o, c in patches))
        a = r.choice([c for _, c in patches if c != b])
    source_b = _source_b(spec, r, q, b, tier_b)
    return Example(
        q, a, b, tier_a, tier_b, source_a, source_b, ("[Q]", spec.objects[q]), not relevant, truth
    )


def _case(spec: ToySpec, ex: Example, name: str) -> ConflictCase:
    return ConflictCase(
        source_a=" ".join(ex.source_a),
        source_b=" ".join(ex.source_b),
        question=" ".join(ex.question),
        answer_a=spec.colours[ex.a],
        answer_b=spec.colours[ex.b],
        id=f"{name}-a{ex.tier_a}-b{ex.tier_b}",
        control=ex.answer_a_irrelevant,
    )


def toy_cases(spec: ToySpec, n_conflicts: int, n_controls: int, seed: int) -> CaseSet:
    """Evaluation cases: ``n_conflicts`` conflicts and ``n_controls`` controls (seeded).

    The evaluation stream is seeded apart from the training stream (``seed`` offset), so the
    cases are not training examples.
    """
    r = random.Random(f"toy-eval-{seed}")
    conflicts = [_case(spec, example(spec, r, "conflict"), f"c{i:04d}") for i in range(n_conflicts)]
    controls = [_case(spec, example(spec, r, "control"), f"k{i:04d}") for i in range(n_controls)]
    return CaseSet(tuple(conflicts), tuple(controls), "toy")


def tier_of(case_id: str) -> tuple[int, int] | None:
    """The ``(tier_a, tier_b)`` a toy case id records, else ``None``."""
    parts = case_id.split("-")
    try:
        return int(parts[-2].removeprefix("a")), int(parts[-1].removeprefix("b"))
    except (IndexError, ValueError):
        return None


def training_example(spec: ToySpec, r: random.Random) -> tuple[list[str], int]:
    """One training example: ``(tokens, label colour)``, drawn by :attr:`ToySpec.mix`.

    A single-source example's label is its source's answer, or with probability ``eps`` of its
    tier a uniformly random colour; a two-source example is ``noisy`` (see :func:`example`) and
    its label is the world's answer. An example with an irrelevant channel A (a ``control``: A
    shows only other objects) is labelled like B alone: it teaches that a patch of another
    object is no evidence, which is what the evaluation's controls assume.
    """
    kind = r.choices(("a", "b", "both", "irrelevant"), spec.mix)[0]
    kinds = {"both": "noisy", "irrelevant": "control"}
    ex = example(spec, r, kinds.get(kind, "consistent"))
    if kind == "a":
        tokens, eps, label = [*ex.source_a, *ex.question], spec.eps_a[ex.tier_a], ex.a
    elif kind == "b":
        tokens, eps, label = [*ex.source_b, *ex.question], spec.eps_b[ex.tier_b], ex.b
    elif kind == "irrelevant":
        tokens = [*ex.source_a, *ex.source_b, *ex.question]
        eps, label = spec.eps_b[ex.tier_b], ex.b
    else:
        assert ex.truth is not None
        tokens, eps, label = [*ex.source_a, *ex.source_b, *ex.question], 0.0, ex.truth
    if r.random() < eps:
        label = r.randrange(spec.n_colours)
    return tokens, label


def bayes_example(spec: ToySpec, r: random.Random) -> tuple[list[str], list[float]]:
    """One training-distribution example with the Bayes-optimal answer distribution.

    Drawn exactly as :func:`training_example` draws (the same ``mix`` and noise), but instead of
    a sampled label it returns ``P(label = colour | prompt)`` under the task's own noise model:
    a single source (or an irrelevant A with B) gives its answer with probability
    ``1 - eps + eps / K`` and every other colour ``eps / K``; two noisy sources give the
    posterior of the world's answer, ``P(c) ∝ P(A shows a | c) P(B shows b | c)`` with
    ``P(shows x | c) = 1 - eps`` if ``x == c`` else ``eps / (K - 1)``. A model whose predictive
    distribution is this one has learned how reliable each channel is at each tier; its
    expected excess loss is the KL divergence from it (the toy's training criterion).

    It consumes ``r`` exactly as :func:`training_example` does, so the same seed draws the same
    prompts, each with the label the training stream would have sampled from this distribution.
    """
    k = spec.n_colours
    kind = r.choices(("a", "b", "both", "irrelevant"), spec.mix)[0]
    kinds = {"both": "noisy", "irrelevant": "control"}
    ex = example(spec, r, kinds.get(kind, "consistent"))
    if kind == "both":
        ea, eb = spec.eps_a[ex.tier_a], spec.eps_b[ex.tier_b]
        shows_a = [(1 - ea) if c == ex.a else ea / (k - 1) for c in range(k)]
        shows_b = [(1 - eb) if c == ex.b else eb / (k - 1) for c in range(k)]
        joint = [x * y for x, y in zip(shows_a, shows_b, strict=True)]
        total = sum(joint)
        r.random()  # training_example's label-noise draw (no noise on a two-source label)
        return [*ex.source_a, *ex.source_b, *ex.question], [x / total for x in joint]
    if kind == "a":
        tokens, eps, answer = [*ex.source_a, *ex.question], spec.eps_a[ex.tier_a], ex.a
    elif kind == "b":
        tokens, eps, answer = [*ex.source_b, *ex.question], spec.eps_b[ex.tier_b], ex.b
    else:
        tokens = [*ex.source_a, *ex.source_b, *ex.question]
        eps, answer = spec.eps_b[ex.tier_b], ex.b
    if r.random() < eps:  # training_example's label-noise draw, and its colour
        r.randrange(k)
    return tokens, [(1 - eps + eps / k) if c == answer else eps / k for c in range(k)]


def bayes_heldout(
    spec: ToySpec, ids: dict[str, int], size: int, seed: int
) -> dict[str, torch.Tensor]:
    """A held-out set of ``size`` training-distribution prompts with their Bayes answers.

    Seeded apart from the training stream and the evaluation cases. Returns ``input_ids``,
    ``attention_mask``, ``last`` (as :func:`training_batch`), ``colours`` (the colour tokens'
    ids) and ``bayes`` (size, K): each prompt's Bayes-optimal distribution over the colours.
    """
    r = random.Random(f"toy-heldout-{seed}")
    rows = [bayes_example(spec, r) for _ in range(size)]
    batch = _pad(spec, ids, [tokens for tokens, _ in rows])
    batch["colours"] = torch.tensor([ids[c] for c in spec.colours])
    batch["bayes"] = torch.tensor([probs for _, probs in rows], dtype=torch.float64)
    return batch


def _pad(spec: ToySpec, ids: dict[str, int], rows: list[list[str]]) -> dict[str, torch.Tensor]:
    width = max(len(tokens) for tokens in rows)
    input_ids = torch.full((len(rows), width), ids[PAD], dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, tokens in enumerate(rows):
        input_ids[i, : len(tokens)] = torch.tensor([ids[t] for t in tokens])
        mask[i, : len(tokens)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "last": mask.sum(1) - 1}


def training_batch(
    spec: ToySpec, ids: dict[str, int], size: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """A batch of training examples as right-padded token ids (the only randomness: ``generator``).

    Returns:
        ``input_ids`` and ``attention_mask`` (size, length), ``last`` (the answer position of
        each row) and ``labels`` (the label colour's token id).
    """
    r = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
    rows = [training_example(spec, r) for _ in range(size)]
    batch = _pad(spec, ids, [tokens for tokens, _ in rows])
    batch["labels"] = torch.tensor([ids[spec.colours[label]] for _, label in rows])
    return batch


def compositional_parts(spec: ToySpec) -> dict[str, Sequence[str]]:
    """The parts of each compound token (its two halves and its channel's marker)."""
    parts: dict[str, Sequence[str]] = {}
    for token in spec.vocab:
        if "=" in token:
            left, right = token.split("=")
            parts[token] = (left, right, "[A]")
        elif ">" in token and token not in SPECIAL:
            left, right = token.split(">")
            parts[token] = (left, right, "[B]")
    return parts
