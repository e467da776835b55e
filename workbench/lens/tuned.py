"""The tuned lens: one learned affine translator per layer in front of the model's own head.

Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned Lens"
(arXiv 2303.08112). The logit lens assumes that every layer speaks the final layer's basis; it
does not, so early layers read through the head look worse than they are (and are biased towards
some tokens). The tuned lens learns, for each layer ``l``, an affine map

    T_l(h) = h + W_l h + b_l          (W_l, b_l start at zero: T_l starts as the identity)

trained so that ``unembed(final_norm(T_l(h_l)))`` matches the model's own output distribution:
the loss is KL(final || lens), summed over layers and averaged over tokens. The final layer's
translator is fixed to the identity (its logit lens already is the model's output).

Here the translators train on *captured activations*, not through the model: one capture of
``resid_post`` at every layer, then minibatches of rows, each step computing the model's final
log-probabilities from the last layer's rows through the same head. The default optimizer follows
the paper's: SGD with Nesterov momentum 0.9 and unit learning rate in the momentum-corrected
scale (``lr * (1 - momentum)``), linear decay to zero, weight decay 1e-3 and gradient clipping
at norm 1. Same seed, same texts: the same translators.

A trained lens is saved as ``translators.safetensors`` (``weight`` (n_layers, d, d) and ``bias``
(n_layers, d)) plus ``tuned_lens.json``, a manifest naming the model, its revision, the training
texts and the hyperparameters. Nothing is pickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.capturing import Activations, capture
from workbench.lens.core import LensError, PositionSpec, lens_sites, prepare
from workbench.lens.readouts import activations_lens, decoded_lens
from workbench.lens.results import LensResult
from workbench.lens.training import TunedLensTraining, fit_translators
from workbench.models.subject import Subject
from workbench.store import atomic_save_tensors, atomic_write_bytes

log = logging.getLogger(__name__)

FORMAT = "workbench.tuned_lens/1"
MANIFEST = "tuned_lens.json"
WEIGHTS = "translators.safetensors"


@dataclass(frozen=True, eq=False)
class TunedLens:
    """One affine translator per layer: ``T_l(h) = h + h @ weight[l].T + bias[l]``.

    Build one with :meth:`train` (or :meth:`identity`, which is the logit lens), read it with
    :meth:`apply` or :func:`tuned_lens`, keep it with :meth:`save` / :meth:`load`.

    Attributes:
        weight: (n_layers, d_model, d_model) residual part of each translator, float32.
        bias: (n_layers, d_model), float32.
        manifest: Model, revision, training texts, hyperparameters and training curves.
    """

    weight: Float[Tensor, "layer d d"] = field(repr=False)
    bias: Float[Tensor, "layer d"] = field(repr=False)
    manifest: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        w = self.weight.detach().to(torch.float32).contiguous()
        b = self.bias.detach().to(torch.float32).contiguous()
        if w.dim() != 3 or w.shape[1] != w.shape[2] or b.shape != w.shape[:2]:
            raise LensError(
                f"translators must be weight (layer, d, d) and bias (layer, d); got "
                f"{tuple(w.shape)} and {tuple(b.shape)}"
            )
        object.__setattr__(self, "weight", w)
        object.__setattr__(self, "bias", b)

    @property
    def n_layers(self) -> int:
        """Layers (one translator each)."""
        return int(self.weight.shape[0])

    @property
    def d_model(self) -> int:
        """Residual width."""
        return int(self.weight.shape[1])

    def translate(self, layer: int, h: Float[Tensor, "row d"]) -> Float[Tensor, "row d"]:
        """Applies layer ``layer``'s translator to rows of ``resid_post.layer``."""
        w = self.weight[layer].to(device=h.device)
        b = self.bias[layer].to(device=h.device)
        x = h.to(torch.float32)
        return x + x @ w.T + b

    @classmethod
    def identity(cls, subject: Subject) -> TunedLens:
        """The untrained lens (every translator the identity): equal to the logit lens."""
        lens_sites(subject)
        n, d = subject.n_layers, subject.d_model
        return cls(torch.zeros(n, d, d), torch.zeros(n, d), _manifest(subject, None, None))

    @classmethod
    def train(
        cls,
        subject: Subject,
        texts: Any,
        *,
        n_texts: int | None = None,
        max_length: int | None = None,
        batch_size: int = 8,
        progress: bool = True,
        **hyperparameters: Any,
    ) -> TunedLens:
        """Trains one translator per layer (the last stays the identity) on captured activations.

        Args:
            subject: A causal LM whose family declares ``unembed``.
            texts: Texts or a source spec (``builtin:pydoc``, a ``.txt``/``.jsonl`` file).
            n_texts: For a source spec, train on its first ``n_texts`` texts.
            max_length: Truncate longer texts.
            batch_size: Texts per forward pass of the capture.
            progress: Show progress bars.
            **hyperparameters: Fields of :class:`TunedLensTraining` (``steps``, ``lr``,
                ``batch_tokens``, ``optimizer``, ``seed``, ...).

        Returns:
            The trained lens; its manifest records the texts, the hyperparameters and the
            training KL by layer at the first and the last steps.

        Raises:
            LensError: No unembedding, or an unknown or bad hyperparameter.
            InputError: Empty or unreadable texts.
        """
        started = time.time()
        settings = _settings(hyperparameters)
        lens_sites(subject)
        acts = capture(
            subject,
            texts,
            sites="resid_post",
            layers="all",
            n_texts=n_texts,
            max_length=max_length,
            batch_size=batch_size,
            progress=progress,
        )
        source = str(texts) if isinstance(texts, str | os.PathLike) else "in-memory texts"
        return cls._fit(subject, acts, settings, progress, source, max_length, started)

    @classmethod
    def fit(
        cls, subject: Subject, acts: Activations, *, progress: bool = False, **hyperparameters: Any
    ) -> TunedLens:
        """Trains the translators on activations already captured (no forward pass of the model).

        Args:
            subject: The model the activations come from (its head decodes them).
            acts: ``resid_post`` at every layer, e.g. ``capture(subject, texts,
                sites="resid_post", layers="all")``, or rows read from a cache.
            progress: Show a progress bar.
            **hyperparameters: Fields of :class:`TunedLensTraining`.

        Raises:
            LensError: No unembedding, a layer missing from ``acts``, or a bad hyperparameter.
        """
        settings = _settings(hyperparameters)
        missing = [
            layer for layer in range(subject.n_layers) if f"resid_post.{layer}" not in acts.sites
        ]
        if missing:
            raise LensError(
                f"a tuned lens trains on resid_post at every layer; the activations lack layers "
                f"{missing[:5]}{'...' if len(missing) > 5 else ''}"
            )
        return cls._fit(subject, acts, settings, progress, "activations", None, time.time())

    @classmethod
    def _fit(
        cls,
        subject: Subject,
        acts: Activations,
        settings: TunedLensTraining,
        progress: bool,
        source: str,
        max_length: int | None,
        started: float,
    ) -> TunedLens:
        norm, unembed = lens_sites(subject)
        rows = [acts[f"resid_post.{layer}"] for layer in range(subject.n_layers)]
        weight, bias, curves = fit_translators(subject, norm, unembed, rows, settings, progress)
        digest = hashlib.sha256()
        digest.update(acts.offsets.numpy().astype("int64").tobytes())
        digest.update(acts.token_ids.numpy().astype("int64").tobytes())
        training = {
            "texts": source,
            "n_texts": len(acts.offsets) - 1,
            "n_tokens": int(acts.offsets[-1]),
            "input_hash": digest.hexdigest(),
            "max_length": max_length,
            "seconds": round(time.time() - started, 3),
            **curves,
        }
        return cls(weight, bias, _manifest(subject, settings, training))

    def check(self, subject: Subject) -> None:
        """Checks that this lens fits ``subject`` (layers and width).

        Raises:
            LensError: Another number of layers or another width.
        """
        if (self.n_layers, self.d_model) != (subject.n_layers, subject.d_model):
            m = self.manifest
            raise LensError(
                f"this tuned lens was trained for {m.get('model', '?')!r} ({self.n_layers} "
                f"layers, d_model {self.d_model}); {subject.name!r} has {subject.n_layers} "
                f"layers, d_model {subject.d_model}"
            )
        trained_for = (self.manifest.get("model"), self.manifest.get("revision"))
        if trained_for != (subject.name, subject.revision) and self.manifest.get("training"):
            log.warning(
                "tuned lens trained for %s@%s is applied to %s@%s",
                *trained_for,
                subject.name,
                subject.revision,
            )

    def apply(self, subject: Subject, inputs: Any, **options: Any) -> LensResult:
        """Same as :func:`tuned_lens` with this lens."""
        return tuned_lens(subject, inputs, self, **options)

    def read(self, subject: Subject, acts: Activations, **options: Any) -> LensResult:
        """This lens on activations already captured (see :func:`~workbench.lens.activations_lens`).

        Args:
            subject: The model the activations come from.
            acts: ``resid_post`` at the layers read and at the last one.
            **options: ``layers``, ``rows``, ``top_k``, ``target`` as in ``activations_lens``.
        """
        self.check(subject)
        meta = {"tuned_lens": {k: self.manifest.get(k) for k in ("model", "revision", "training")}}
        return activations_lens(
            subject, acts, translate=self.translate, name="tuned", meta=meta, **options
        )

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Writes ``translators.safetensors``, then ``tuned_lens.json``, each atomically.

        Returns:
            The folder.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_save_tensors(
            folder / WEIGHTS, {"weight": self.weight, "bias": self.bias}, {"format": FORMAT}
        )
        manifest = {**self.manifest, "format": FORMAT, "weights_sha256": _sha256(folder / WEIGHTS)}
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        atomic_write_bytes(folder / MANIFEST, text.encode())
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike[str], subject: Subject | None = None) -> TunedLens:
        """Reads a lens written by :meth:`save` (safetensors and JSON; nothing is unpickled).

        Args:
            folder: The folder.
            subject: When given, the lens is checked against it (see :meth:`check`).

        Raises:
            LensError: No lens there, a manifest that does not match the weights, or (with
                ``subject``) a lens for another model.
        """
        from safetensors.torch import load_file

        folder = Path(folder)
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except FileNotFoundError:
            raise LensError(f"no tuned lens in {folder} (no {MANIFEST})") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise LensError(f"cannot read {folder / MANIFEST}: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise LensError(f"{folder / MANIFEST} is not a {FORMAT} manifest")
        path = folder / WEIGHTS
        if not path.is_file() or _sha256(path) != manifest.get("weights_sha256"):
            raise LensError(f"{path} is missing or does not match {MANIFEST}")
        tensors = load_file(path)
        if set(tensors) != {"weight", "bias"}:
            raise LensError(f"{path} must hold 'weight' and 'bias', holds {sorted(tensors)}")
        lens = cls(tensors["weight"], tensors["bias"], manifest)
        if subject is not None:
            lens.check(subject)
        return lens


def tuned_lens(
    subject: Subject,
    inputs: Any,
    lens: TunedLens,
    *,
    layers: str | int | list[int] = "all",
    positions: PositionSpec = "all",
    top_k: int = 5,
    target: str | int | None = None,
    n_texts: int | None = None,
    max_length: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
) -> LensResult:
    """Reads every layer through its translator, then the model's final norm and unembedding.

    Arguments as :func:`workbench.lens.logit_lens`, plus the trained ``lens``.

    Returns:
        The :class:`LensResult` (``lens="tuned"``).

    Raises:
        LensError: A lens for another model, no unembedding, bad ``positions``/``top_k``/target.
        SiteError: Unknown layer.
    """
    if not isinstance(lens, TunedLens):
        raise LensError(f"lens must be a TunedLens, got {type(lens).__name__}")
    request = prepare(subject, layers, positions, top_k, target)
    lens.check(subject)
    kw = dict(n_texts=n_texts, max_length=max_length, batch_size=batch_size, progress=progress)
    meta = {"tuned_lens": {k: lens.manifest.get(k) for k in ("model", "revision", "training")}}
    return decoded_lens("tuned", subject, inputs, request, lens.translate, kw, meta)


def _settings(hyperparameters: dict[str, Any]) -> TunedLensTraining:
    known = set(TunedLensTraining.__dataclass_fields__)
    unknown = sorted(set(hyperparameters) - known)
    if unknown:
        raise LensError(
            f"unknown hyperparameter(s) {unknown}; accepted: {', '.join(sorted(known))}"
        )
    return TunedLensTraining(**hyperparameters)


def _manifest(
    subject: Subject, settings: TunedLensTraining | None, training: dict[str, Any] | None
) -> dict[str, Any]:
    from workbench import __version__

    prov = subject.provenance()
    return {
        "format": FORMAT,
        "model": subject.name,
        "revision": subject.revision,
        "source": subject.source,
        "architecture": prov["architecture"],
        "family": prov["family"],
        "n_layers": subject.n_layers,
        "d_model": subject.d_model,
        "vocab_size": int(subject.model.config.vocab_size),
        "translator": "h + h @ weight[l].T + bias[l]; the last layer is the identity",
        "hyperparameters": None if settings is None else asdict(settings),
        "training": training,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "workbench": __version__,
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(2**20), b""):
            h.update(block)
    return h.hexdigest()
