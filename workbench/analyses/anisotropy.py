"""The anisotropy study: representation geometry by layer and across training checkpoints.

Reproduces the measurements of *Revisiting Anisotropy in Language Transformers: The Geometry of
Learning Dynamics* (arXiv 2604.08764) on any model the workbench can load:

1. **Per layer** (:func:`layer_metrics`): mean pairwise cosine, top-eigenvalue share (MEV),
   IsoScore, effective rank and TwoNN intrinsic dimension of the token representations.
2. **Across checkpoints** (:func:`sweep_checkpoints`): the same per layer for every checkpoint of
   a series (the workbench's ``tiny-lm`` steps, Pythia's ``stepN`` revisions, ...). Each
   checkpoint is captured, measured, freed, and its numbers cached on disk, so reruns are cheap.
3. **Frequency** (:func:`workbench.geometry.frequency_distance_correlation`): how a token's
   corpus frequency relates to its occurrences' distance from the centroid.
4. **Tangent subspace** (:func:`tangent_test`): the top directions along which early training
   moved the representations of a layer form a low-rank subspace ``Q``; later, the gradient of the
   loss with respect to that layer's representations is tested for holding more energy in ``Q``
   than in random subspaces of equal rank. (The paper's exact construction is not public; this
   is our operationalization, labelled as such in the notebook.)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from workbench import geometry
from workbench.capture import capture
from workbench.errors import ConfigError
from workbench.inputs import read_texts
from workbench.models import Subject, load_model, local_checkpoints
from workbench.models.tiny_lm import ensure_tiny_lm

log = logging.getLogger(__name__)

LAYER_METRICS = ("mean_cosine", "mev", "isoscore", "effective_rank", "twonn")
CHECKPOINT_METRICS = ("mean_cosine", "isoscore", "effective_rank", "twonn")
CACHE_FORMAT = 2
"""Version of the per-checkpoint cache files (2: with the frequency scatter's points)."""


@dataclass(frozen=True)
class AnisotropyConfig:
    """Parameters of the study (the notebook's parameters cell, typed).

    Attributes:
        model: ``tiny-lm``, ``minilm``, a local folder or an HF id.
        checkpoints: ``"all"`` (every local ``step-N``), ``"none"`` (the model as loaded), or a
            comma list of revisions such as ``"step1000,step8000,step143000"``.
        layers: Layer selection (``"all"``, ``"0,3,-1"``, ``"2:6"``).
        site: Site kind measured at each layer.
        text_source: Where the texts come from (``builtin:pydoc``, a ``.txt``/``.jsonl`` file).
        n_texts: How many texts.
        max_length: Tokens per text at most.
        seed: Seed for subsampling and the tangent test's random bases.
        max_points: Rows subsampled for the nearest-neighbour metrics (TwoNN).
        freq_texts: Texts of the source (the first ones, at least ``n_texts``) whose token
            counts are the corpus frequencies of the frequency-distance correlation. For
            ``tiny-lm`` on ``builtin:pydoc`` the default covers its whole training corpus.
        tangent_rank: Rank of the early-training tangent subspace.
        tangent_fit: How many earliest non-initial checkpoints fit the tangent subspace.
        batch_size: Texts per forward pass.
        device: Torch device.
    """

    model: str = "tiny-lm"
    checkpoints: str = "all"
    layers: str = "all"
    site: str = "resid_post"
    text_source: str = "builtin:pydoc"
    n_texts: int = 200
    max_length: int = 64
    seed: int = 0
    max_points: int = 5000
    freq_texts: int = 5000
    tangent_rank: int = 8
    tangent_fit: int = 3
    batch_size: int = 16
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in (
            "n_texts",
            "max_length",
            "max_points",
            "freq_texts",
            "tangent_rank",
            "tangent_fit",
            "batch_size",
        ):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not str(self.checkpoints).strip():
            raise ConfigError("checkpoints must be 'all', 'none' or a comma list of revisions")

    def key(self) -> str:
        """Hash of everything that changes a checkpoint's numbers (for the per-checkpoint cache)."""
        fields = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("checkpoints", "device", "batch_size")
        }
        fields["cache_format"] = CACHE_FORMAT
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def layer_metrics(x: Any, *, max_points: int = 5000, seed: int = 0) -> dict[str, float]:
    """The per-layer geometry of an ``(n, d)`` set of representations.

    TwoNN uses a random subsample of at most ``max_points`` rows (seeded); the other metrics use
    every row.
    """
    x = np.asarray(x, dtype=np.float64)
    sub = x
    if len(x) > max_points:
        sub = x[np.random.default_rng(seed).choice(len(x), max_points, replace=False)]
    return {
        "mean_cosine": float(geometry.mean_cosine(x)),
        "mev": float(geometry.mev(x)),
        "isoscore": float(geometry.isoscore(x)),
        "effective_rank": float(geometry.effective_rank(x)),
        "twonn": float(geometry.twonn(sub)),
    }


def step_of(revision: str | None) -> int | None:
    """The training step a revision names (``step-200`` and ``step200`` give 200), else ``None``."""
    if revision is None:
        return None
    digits = revision.removeprefix("step").lstrip("-")
    return int(digits) if revision.startswith("step") and digits.isdigit() else None


def resolve_checkpoints(model: str, checkpoints: str) -> list[str | None]:
    """Turns the ``checkpoints`` parameter into revisions, in training order.

    Raises:
        ConfigError: ``all`` for a model whose checkpoint list cannot be read offline.
    """
    spec = str(checkpoints).strip()
    if spec == "none":
        return [None]
    if spec != "all":
        revisions = [r.strip() for r in spec.split(",") if r.strip()]
        return sorted(revisions, key=lambda r: (step_of(r) is None, step_of(r) or 0))
    folder = ensure_tiny_lm() if model == "tiny-lm" else Path(model).expanduser()
    found = local_checkpoints(folder)
    if not found:
        raise ConfigError(
            f"checkpoints='all' needs a folder of step-N checkpoints; {model!r} has none. "
            "Give a comma list of revisions (e.g. step1000,step8000) or 'none'"
        )
    return list(found)


@dataclass(frozen=True)
class CheckpointResult:
    """Everything measured on one checkpoint.

    Attributes:
        revision: The checkpoint (``None`` for the model as loaded).
        step: Its training step, when the revision names one.
        per_layer: One dict per measured layer: ``layer`` plus :data:`LAYER_METRICS`.
        freq_distance_corr: Per-occurrence frequency-distance correlation at the last layer.
        freq_distance_by_layer: The same at each measured layer.
        embedding_freq_corr: Frequency vs distance to centroid of the input embedding table.
        n_tokens: Rows measured.
        frequency: The last layer's per-type points behind ``freq_distance_corr`` (the fields of
            :class:`~workbench.geometry.FrequencyDistance` as lists), for the scatter figure.
    """

    revision: str | None
    step: int | None
    per_layer: list[dict[str, float]]
    freq_distance_corr: float | None
    freq_distance_by_layer: list[float | None]
    embedding_freq_corr: float | None
    n_tokens: int
    frequency: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (also the cache format)."""
        return asdict(self)

    def frequency_figure(self) -> Any:
        """Log corpus frequency vs mean distance to the centroid per type, at the last layer."""
        return geometry.FrequencyDistance(**self.frequency).figure()


def token_counts(subject: Subject, config: AnisotropyConfig) -> np.ndarray:
    """Corpus count of every token id over the first ``freq_texts`` texts of the source.

    The texts are tokenized whole (no ``max_length``): these are frequencies, not inputs.
    """
    texts = read_texts(config.text_source, max(config.freq_texts, config.n_texts))
    vocab = int(subject.model.get_input_embeddings().num_embeddings)
    counts = np.zeros(vocab, dtype=np.int64)
    for ids in subject.tokenizer(texts, add_special_tokens=False)["input_ids"]:
        counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=vocab)[:vocab]
    return counts


def analyze_checkpoint(
    subject: Subject,
    texts: Sequence[str],
    config: AnisotropyConfig,
    counts: np.ndarray | None = None,
) -> CheckpointResult:
    """Captures ``config.site`` at every selected layer of one checkpoint and measures it.

    Args:
        subject: The checkpoint.
        texts: The texts captured.
        config: The study's parameters.
        counts: Corpus token counts (default: :func:`token_counts`); the tokenizer is shared by
            a checkpoint series, so a sweep computes them once.
    """
    acts = capture(
        subject,
        list(texts),
        sites=config.site,
        layers=config.layers,
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
    )
    token_ids = acts.token_ids.numpy()
    if counts is None:
        counts = token_counts(subject, config)
    per_layer, by_layer, freq = [], [], None
    for name in acts.sites:
        x = acts[name].double().numpy()
        per_layer.append(
            {
                "layer": int(name.rsplit(".", 1)[1]),
                **layer_metrics(x, max_points=config.max_points, seed=config.seed),
            }
        )
        freq = geometry.frequency_distance_correlation(x, token_ids, counts)
        by_layer.append(_finite(freq.r))
    table = subject.model.get_input_embeddings().weight.detach().double().cpu().numpy()
    embed_r = _finite(geometry.embedding_frequency_correlation(table, counts).r)
    return CheckpointResult(
        subject.revision,
        step_of(subject.revision),
        per_layer,
        by_layer[-1],
        by_layer,
        embed_r,
        len(token_ids),
        {
            "r": freq.r,
            "n_types": freq.n_types,
            **{
                k: getattr(freq, k).tolist()
                for k in ("token_ids", "log_frequency", "distance", "occurrences")
            },
        },
    )


def _finite(value: float | None) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


@dataclass(frozen=True)
class CheckpointSweep:
    """The study across checkpoints.

    Attributes:
        model: The model studied.
        results: One :class:`CheckpointResult` per checkpoint, in training order.
    """

    model: str
    results: list[CheckpointResult]

    @property
    def final(self) -> CheckpointResult:
        """The last checkpoint's result."""
        return self.results[-1]

    def rows(self) -> list[dict[str, Any]]:
        """Tidy rows ``{step, revision, layer, metric...}`` for every checkpoint and layer."""
        return [
            {
                "step": r.step,
                "revision": r.revision,
                **{k: row[k] for k in ("layer", *CHECKPOINT_METRICS)},
            }
            for r in self.results
            for row in r.per_layer
        ]

    def heatmaps(self) -> Any:
        """Layer x training-step heatmaps, one panel per metric."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        from workbench.figures import TWO_COLUMN, style

        labels = [str(r.step if r.step is not None else r.revision) for r in self.results]
        layers = [row["layer"] for row in self.final.per_layer]
        fig = make_subplots(
            rows=1,
            cols=len(CHECKPOINT_METRICS),
            subplot_titles=CHECKPOINT_METRICS,
            horizontal_spacing=0.06,
        )
        for col, metric in enumerate(CHECKPOINT_METRICS, 1):
            z = [[r.per_layer[i][metric] for r in self.results] for i in range(len(layers))]
            fig.add_trace(
                go.Heatmap(
                    z=z,
                    x=labels,
                    y=layers,
                    coloraxis=None,
                    showscale=False,
                    colorscale="Viridis",
                    hovertemplate="step %{x}<br>layer %{y}<br>%{z:.3f}<extra>"
                    + metric
                    + "</extra>",
                ),
                row=1,
                col=col,
            )
            fig.update_xaxes(title_text="step", type="category", row=1, col=col)
        fig.update_yaxes(title_text="layer", row=1, col=1)
        return style(
            fig, title=f"{self.model}: geometry over training", width=TWO_COLUMN, height=320
        )

    def curves(self, metric: str = "mean_cosine") -> Any:
        """One metric against training step, one line per layer."""
        import plotly.graph_objects as go

        from workbench.figures import style

        fig = go.Figure()
        steps = [r.step if r.step is not None else i for i, r in enumerate(self.results)]
        for i, row in enumerate(self.final.per_layer):
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=[r.per_layer[i][metric] for r in self.results],
                    mode="lines+markers",
                    name=f"layer {row['layer']}",
                )
            )
        fig.update_xaxes(title_text="training step", type="log" if min(steps) > 0 else "linear")
        fig.update_yaxes(title_text=metric.replace("_", " "))
        return style(fig, title=f"{metric.replace('_', ' ')} over training")


def layer_profile_figure(result: CheckpointResult, title: str) -> Any:
    """Each metric by layer (one small panel per metric) for one checkpoint."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from workbench.figures import TWO_COLUMN, style

    fig = make_subplots(
        rows=1, cols=len(LAYER_METRICS), subplot_titles=LAYER_METRICS, horizontal_spacing=0.07
    )
    layers = [row["layer"] for row in result.per_layer]
    for col, metric in enumerate(LAYER_METRICS, 1):
        fig.add_trace(
            go.Scatter(
                x=layers,
                y=[row[metric] for row in result.per_layer],
                mode="lines+markers",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="layer", row=1, col=col, dtick=1)
    return style(fig, title=title, width=TWO_COLUMN, height=280)


def sweep_checkpoints(
    config: AnisotropyConfig, *, cache_dir: str | Path | None = None, progress: bool = True
) -> CheckpointSweep:
    """Runs :func:`analyze_checkpoint` on every checkpoint, one model in memory at a time.

    Args:
        config: The study's parameters.
        cache_dir: Per-checkpoint results are cached here as JSON and reused on a rerun with the
            same configuration.
        progress: Show a progress bar over checkpoints.
    """
    texts = read_texts(config.text_source, config.n_texts)
    revisions = resolve_checkpoints(config.model, config.checkpoints)
    cache = Path(cache_dir) if cache_dir is not None else None
    results, counts = [], None
    for revision in tqdm(revisions, desc="checkpoints", disable=not progress):
        path = cache / f"{config.key()}-{revision or 'default'}.json" if cache else None
        if path is not None and path.is_file():
            results.append(CheckpointResult(**json.loads(path.read_text())))
            continue
        subject = load_model(config.model, revision=revision, device=config.device)
        if counts is None:
            counts = token_counts(subject, config)
        result = analyze_checkpoint(subject, texts, config, counts)
        del subject
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            from workbench.store import atomic_write_bytes

            atomic_write_bytes(path, json.dumps(result.to_dict()).encode())
        results.append(result)
    return CheckpointSweep(config.model, results)


# --- tangent subspace --------------------------------------------------------------------------


def _layer_states(
    subject: Subject, texts: Sequence[str], layer: int, config: AnisotropyConfig
) -> torch.Tensor:
    acts = capture(
        subject,
        list(texts),
        sites=f"{config.site}.{layer}",
        max_length=config.max_length,
        batch_size=config.batch_size,
        progress=False,
    )
    return acts[f"{config.site}.{layer}"].double()


def tangent_basis(displacements: Sequence[torch.Tensor], rank: int) -> np.ndarray:
    """Top-``rank`` right singular vectors of stacked displacements, as a ``(d, rank)`` basis."""
    stacked = torch.cat([d - d.mean(0) for d in displacements]).numpy()
    _, _, vt = np.linalg.svd(stacked, full_matrices=False)
    return vt[:rank].T


def representation_gradients(
    subject: Subject, texts: Sequence[str], site: str, config: AnisotropyConfig
) -> np.ndarray:
    """Gradient of the next-token loss with respect to one site's tensor: ``(d, n_tokens)``.

    Runs a forward and backward pass per batch with a hook that keeps the site's output and asks
    autograd for its gradient; padded positions are dropped.
    """
    from workbench.hooking import pad as _pad
    from workbench.inputs import tokenize

    target = subject.site(site)
    toks = tokenize(
        subject.tokenizer,
        list(texts),
        max_length=config.max_length,
        vocab_size=int(subject.model.get_input_embeddings().num_embeddings),
    )
    pad = subject.tokenizer.pad_token_id or 0
    grads = []
    kept: dict[str, torch.Tensor] = {}

    def keep(_module, _args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden.retain_grad()
        kept["h"] = hidden

    handle = target.module.register_forward_hook(keep)
    try:
        for start in range(0, len(toks.sequences), config.batch_size):
            ids, mask = _pad(list(toks.sequences[start : start + config.batch_size]), pad, "right")
            ids, mask = ids.to(subject.device), mask.to(subject.device)
            labels = ids.masked_fill(mask == 0, -100)
            subject.model.zero_grad(set_to_none=True)
            out = subject.model(input_ids=ids, attention_mask=mask, labels=labels)
            out.loss.backward()
            grads.append(kept["h"].grad[mask.bool()].detach().double().cpu())
    finally:
        handle.remove()
        subject.model.zero_grad(set_to_none=True)
    return torch.cat(grads).numpy().T


@dataclass(frozen=True)
class TangentResult:
    """The tangent-subspace test at each later checkpoint.

    Attributes:
        layer: Layer tested.
        rank: Rank of the tangent subspace.
        fit_revisions: Checkpoints whose displacement from the first one defined the subspace.
        steps: Later checkpoints tested.
        shares: Share of gradient energy inside the subspace, per tested checkpoint.
        null_means: Mean share in random subspaces of equal rank, per tested checkpoint.
        p_values: Permutation p-values, per tested checkpoint.
    """

    layer: int
    rank: int
    fit_revisions: list[str]
    steps: list[int | None]
    shares: list[float]
    null_means: list[float]
    p_values: list[float]
    d_model: int = 0
    notes: list[str] = field(default_factory=list)

    def figure(self) -> Any:
        """Share of gradient energy in the tangent subspace vs random subspaces, over training."""
        import plotly.graph_objects as go

        from workbench.figures import style

        fig = go.Figure()
        fig.add_trace(
            go.Scatter(
                x=self.steps, y=self.shares, mode="lines+markers", name="early tangent subspace"
            )
        )
        fig.add_trace(
            go.Scatter(
                x=self.steps,
                y=self.null_means,
                mode="lines+markers",
                name="random subspaces (mean)",
                line={"dash": "dash"},
            )
        )
        fig.update_xaxes(title_text="training step", type="log")
        fig.update_yaxes(title_text="share of gradient energy", rangemode="tozero")
        return style(fig, title=f"tangent test, layer {self.layer}, rank {self.rank}")


def tangent_test(
    config: AnisotropyConfig,
    revisions: Sequence[str | None],
    *,
    layer: int = -1,
    n_null: int = 20,
    progress: bool = True,
) -> TangentResult | None:
    """Fits the early tangent subspace and tests later gradients against it.

    The subspace is spanned by the top ``config.tangent_rank`` directions of the displacement of
    the layer's token representations from the first checkpoint to each of the next
    ``config.tangent_fit`` ones. Each later checkpoint's loss gradient with respect to the same
    representations is then tested with :func:`workbench.geometry.tangent_energy_test`.

    Returns:
        ``None`` when the series has too few checkpoints or the model has no language-model loss.
    """
    steps = [r for r in revisions if r is not None]
    if len(steps) < config.tangent_fit + 2:
        return None
    texts = read_texts(config.text_source, config.n_texts)
    first = load_model(config.model, revision=steps[0], device=config.device)
    if (
        not hasattr(first.model, "get_output_embeddings")
        or first.model.get_output_embeddings() is None
    ):
        return None
    layer = layer % first.n_layers
    base = _layer_states(first, texts, layer, config)
    fit = steps[1 : 1 + config.tangent_fit]
    displacements = []
    for revision in fit:
        displacements.append(
            _layer_states(
                load_model(config.model, revision=revision, device=config.device),
                texts,
                layer,
                config,
            )
            - base
        )
    q = tangent_basis(displacements, config.tangent_rank)
    tested, shares, nulls, pvals = [], [], [], []
    for revision in tqdm(
        steps[1 + config.tangent_fit :], desc="tangent test", disable=not progress
    ):
        subject = load_model(config.model, revision=revision, device=config.device)
        g = representation_gradients(subject, texts, f"{config.site}.{layer}", config)
        res = geometry.tangent_energy_test(q, g, n_null=n_null, random_state=config.seed)
        tested.append(step_of(revision))
        shares.append(float(res.share))
        nulls.append(float(np.mean(res.null_shares)))
        pvals.append(float(res.p_value))
    return TangentResult(
        layer,
        config.tangent_rank,
        [str(r) for r in fit],
        tested,
        shares,
        nulls,
        pvals,
        first.d_model,
    )


def run_study(
    config: AnisotropyConfig, *, cache_dir: str | Path | None = None, progress: bool = True
) -> tuple[CheckpointSweep, TangentResult | None]:
    """The whole study: checkpoint sweep and (where the series allows it) the tangent test."""
    sweep = sweep_checkpoints(config, cache_dir=cache_dir, progress=progress)
    revisions = [r.revision for r in sweep.results]
    tangent = tangent_test(config, revisions, progress=progress) if len(revisions) > 1 else None
    return sweep, tangent


def metrics(sweep: CheckpointSweep, tangent: TangentResult | None) -> dict[str, Any]:
    """The ``results.json`` metrics block (keys named by the anisotropy issue)."""
    final = sweep.final
    return {
        "per_layer": [{k: row[k] for k in ("layer", *LAYER_METRICS)} for row in final.per_layer],
        "per_checkpoint": sweep.rows(),
        "freq_distance_corr": final.freq_distance_corr,
        "freq_distance_by_layer": final.freq_distance_by_layer,
        "embedding_freq_distance_corr": final.embedding_freq_corr,
        "tangent_energy_share": tangent.shares[-1] if tangent else None,
        "tangent_random_share": tangent.null_means[-1] if tangent else None,
        "tangent_p_value": tangent.p_values[-1] if tangent else None,
        "n_tokens": final.n_tokens,
    }
