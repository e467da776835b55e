"""The edits: small frozen objects that map a site's tensor to its edited value.

Every edit follows one protocol: ``edit(hidden, ctx) -> Tensor``, where ``hidden`` is the site's
``(batch, pos, d)`` tensor in the current forward pass and ``ctx`` an :class:`EditContext` (the
site, the :class:`~workbench.interventions.positions.TokenPass` that says which token each column
is, and for :func:`skip` the block's input). The result must have ``hidden``'s shape. Edits never
write in place, so autograd sees them and backpropagation goes through them. Before any forward
pass, :func:`~workbench.interventions.intervene` calls ``edit.check(site, subject)`` so that a
wrong width or a source from another model fails at once, in one line.

* :func:`add`: ``h + scale * v`` (activation addition / steering; Turner et al., 2023,
  arXiv 2308.10248; contrastive steering vectors as differences of means, Rimsky et al., 2024,
  arXiv 2312.06681, see :func:`~workbench.interventions.steering_vector`);
* :func:`ablate`: replace by zero or by a mean (mean ablation; Wang et al., 2023, arXiv
  2211.00593);
* :func:`project_out`: ``h - h Q Qᵀ`` for an orthonormal basis ``Q`` of a subspace (directional
  ablation; Arditi et al., 2024, arXiv 2406.11717; tuned-lens's ``ablate_subspace``);
* :func:`patch`: take the values from another run (activation patching; Meng et al., 2022,
  arXiv 2202.05262; Heimersheim & Nanda, 2024, arXiv 2404.15255);
* :func:`skip`: a block's output replaced by its input, i.e. the layer removed (Gromov et al.,
  2024, arXiv 2403.17887);
* :func:`apply`: any function of ``(hidden, ctx)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.capturing import Activations
from workbench.errors import InterventionError
from workbench.interventions.positions import Positions, PositionSpec, TokenPass
from workbench.models.subject import Subject
from workbench.sites import Site


@dataclass(frozen=True, eq=False)
class EditContext:
    """What an edit knows besides the tensor.

    Attributes:
        site: The resolved site being edited.
        tokens: Which token of which text each column holds in this pass.
        block_input: For ``resid_post.L`` sites with a :func:`skip`, block ``L``'s input in this
            pass (``resid_pre.L``, after any edit there); else ``None``.
    """

    site: Site
    tokens: TokenPass
    block_input: Tensor | None = None


class Edit:
    """Base class of the edits: ``edit(hidden, ctx) -> Tensor`` plus an up-front ``check``."""

    def __call__(self, hidden: Float[Tensor, "b p d"], ctx: EditContext) -> Tensor:
        """Returns the edited ``(batch, pos, d)`` tensor (a new one: edits never write in place)."""
        raise NotImplementedError

    def check(self, site: Site, subject: Subject) -> None:
        """Raises :class:`InterventionError` if this edit cannot apply at ``site``."""


def site_width(site: Site, subject: Subject) -> int:
    """Width of a site's tensor: the vocabulary for ``unembed``, else the residual width."""
    if site.kind == "unembed":
        return int(subject.model.config.vocab_size)
    return subject.d_model


def _vector(value: Any, what: str) -> Tensor:
    tensor = torch.as_tensor(value)
    if tensor.dim() != 1 or tensor.numel() == 0:
        raise InterventionError(
            f"{what} must be a 1-D vector (d,), got shape {tuple(tensor.shape)}"
        )
    return tensor if tensor.is_floating_point() else tensor.float()


def _check_width(width: int, site: Site, subject: Subject, what: str) -> None:
    expected = site_width(site, subject)
    if width != expected:
        raise InterventionError(
            f"{what} has width {width} but site {site.name} has width {expected}"
        )


def _where(select: Tensor, new: Tensor, hidden: Tensor) -> Tensor:
    return torch.where(select.unsqueeze(-1), new, hidden)


@dataclass(frozen=True, eq=False)
class Add(Edit):
    """``h + scale * vector`` at the selected positions (see :func:`add`)."""

    vector: Float[Tensor, " d"]
    scale: float = 1.0
    positions: Positions = field(default_factory=lambda: Positions("all"))

    def check(self, site: Site, subject: Subject) -> None:
        """See :meth:`Edit.check`."""
        _check_width(self.vector.shape[0], site, subject, "steering vector")

    def __call__(self, hidden: Tensor, ctx: EditContext) -> Tensor:
        """Returns the edited tensor (see :meth:`Edit.__call__`)."""
        if hidden.shape[-1] != self.vector.shape[0]:
            raise InterventionError(
                f"steering vector has width {self.vector.shape[0]} but site {ctx.site.name} "
                f"has width {hidden.shape[-1]}"
            )
        delta = self.scale * self.vector.to(device=hidden.device, dtype=hidden.dtype)
        return _where(self.positions.select(ctx.tokens), hidden + delta, hidden)


def add(vector: Any, scale: float = 1.0, positions: PositionSpec = "all") -> Add:
    """Adds ``scale * vector`` to the site's tensor (activation steering).

    Args:
        vector: ``(d,)`` tensor or array, ``d`` the site's width.
        scale: Multiplier.
        positions: Which tokens (see :mod:`workbench.interventions.positions`).
    """
    return Add(_vector(vector, "steering vector"), float(scale), Positions.parse(positions))


@dataclass(frozen=True, eq=False)
class Ablate(Edit):
    """Replaces the selected positions by zero or a mean vector (see :func:`ablate`)."""

    mode: Literal["zero", "mean"] = "zero"
    mean: Tensor | Activations | None = None
    positions: Positions = field(default_factory=lambda: Positions("all"))
    _means: dict[str, Tensor] = field(default_factory=dict, init=False, repr=False)

    def check(self, site: Site, subject: Subject) -> None:
        """See :meth:`Edit.check`."""
        if self.mode == "zero":
            return
        if isinstance(self.mean, Activations):
            if site.name not in self.mean:
                raise InterventionError(
                    f"mean activations hold no site {site.name!r}; captured: "
                    f"{', '.join(self.mean.sites)}"
                )
            value = self.mean[site.name].double().mean(0).float()
        else:
            value = self.mean  # type: ignore[assignment]
        _check_width(value.shape[0], site, subject, "ablation mean")
        self._means[site.name] = value

    def __call__(self, hidden: Tensor, ctx: EditContext) -> Tensor:
        """Returns the edited tensor (see :meth:`Edit.__call__`)."""
        if self.mode == "zero":
            value = hidden.new_zeros(())
        else:
            value = self._means.get(ctx.site.name)
            if value is None:  # used outside intervene(): check now
                raise InterventionError(f"ablate('mean') at {ctx.site.name} was never checked")
            value = value.to(device=hidden.device, dtype=hidden.dtype)
        return _where(self.positions.select(ctx.tokens), value.expand_as(hidden), hidden)


def ablate(
    mode: Literal["zero", "mean"] = "zero",
    mean: Any = None,
    positions: PositionSpec = "all",
) -> Ablate:
    """Replaces the site's tensor by zero or by a mean (zero or mean ablation).

    Args:
        mode: ``"zero"`` or ``"mean"``.
        mean: For ``"mean"``: a ``(d,)`` vector, or :class:`~workbench.Activations` holding the
            site (their mean over rows is used, e.g. over a reference corpus).
        positions: Which tokens.
    """
    if mode not in ("zero", "mean"):
        raise InterventionError(f"unknown ablation {mode!r}; use 'zero' or 'mean'")
    if mode == "zero" and mean is not None:
        raise InterventionError("ablate('zero') takes no mean; use ablate('mean', mean=...)")
    if mode == "mean":
        if mean is None:
            raise InterventionError(
                "ablate('mean') needs mean=: a (d,) vector or Activations of the site"
            )
        if not isinstance(mean, Activations):
            mean = _vector(mean, "ablation mean")
    return Ablate(mode, mean, Positions.parse(positions))


@dataclass(frozen=True, eq=False)
class ProjectOut(Edit):
    """Removes the component in ``span(basis)``: ``h - h Qᵀ Q`` (see :func:`project_out`).

    Attributes:
        basis: ``(k, d)`` orthonormal rows ``Q``.
    """

    basis: Float[Tensor, "k d"]
    positions: Positions = field(default_factory=lambda: Positions("all"))

    def check(self, site: Site, subject: Subject) -> None:
        """See :meth:`Edit.check`."""
        _check_width(self.basis.shape[1], site, subject, "project_out basis")

    def __call__(self, hidden: Tensor, ctx: EditContext) -> Tensor:
        """Returns the edited tensor (see :meth:`Edit.__call__`)."""
        q = self.basis.to(device=hidden.device, dtype=hidden.dtype)
        removed = hidden - (hidden @ q.T) @ q
        return _where(self.positions.select(ctx.tokens), removed, hidden)


def project_out(basis: Any, positions: PositionSpec = "all", rtol: float = 1e-6) -> ProjectOut:
    """Projects the site's tensor onto the orthogonal complement of ``span(basis)``.

    The basis is orthonormalized (SVD in float64; directions with singular value below
    ``rtol`` times the largest are dropped), so any spanning set works.

    Args:
        basis: ``(d,)`` one direction, or ``(k, d)`` rows spanning the subspace.
        positions: Which tokens.
        rtol: Relative rank tolerance.
    """
    matrix = torch.as_tensor(basis).detach().double()
    if matrix.dim() == 1:
        matrix = matrix.unsqueeze(0)
    if matrix.dim() != 2 or matrix.numel() == 0:
        raise InterventionError(
            f"project_out basis must be (d,) or (k, d), got shape {tuple(matrix.shape)}"
        )
    _, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    rank = int((s > rtol * s.max()).sum()) if s.max() > 0 else 0
    if rank == 0:
        raise InterventionError("project_out basis is all zeros; give at least one direction")
    return ProjectOut(vh[:rank].float(), Positions.parse(positions))


@dataclass(frozen=True, eq=False)
class Patch(Edit):
    """Takes the selected positions' values from another run (see :func:`patch`)."""

    source: Activations | Tensor
    positions: Positions = field(default_factory=lambda: Positions("all"))
    site: str | None = None
    _tables: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict, init=False, repr=False)

    def check(self, site: Site, subject: Subject) -> None:
        """See :meth:`Edit.check`."""
        if isinstance(self.source, Activations):
            self._tables[site.name] = self._from_activations(site, subject)
        else:
            values = self.source
            if values.dim() == 2:
                values = values.unsqueeze(0)
            _check_width(values.shape[-1], site, subject, "patch source")
            lengths = torch.full((values.shape[0],), values.shape[1])
            self._tables[site.name] = (values.detach(), lengths)

    def _from_activations(self, site: Site, subject: Subject) -> tuple[Tensor, Tensor]:
        acts = self.source
        assert isinstance(acts, Activations)
        model, revision = acts.meta.get("model"), acts.meta.get("revision")
        if model is not None and (model, revision) != (subject.name, subject.revision):
            raise InterventionError(
                f"patch source was captured from model {model!r} (revision {revision!r}) but the "
                f"edit runs on {subject.name!r} (revision {subject.revision!r})"
            )
        if acts.positions != "all":
            raise InterventionError(
                f"patch source was captured with positions={acts.positions!r}; capture it with "
                "positions='all'"
            )
        name = self.site or site.name
        if name not in acts:
            raise InterventionError(
                f"patch source holds no site {name!r}; captured: {', '.join(acts.sites)}"
            )
        rows = acts[name]
        _check_width(rows.shape[-1], site, subject, f"patch source {name}")
        lengths = acts.offsets.diff()
        table = rows.new_zeros(len(lengths), int(lengths.max()), rows.shape[-1])
        for i in range(len(lengths)):
            table[i, : int(lengths[i])] = acts.text(i, name)
        return table, lengths

    def __call__(self, hidden: Tensor, ctx: EditContext) -> Tensor:
        """Returns the edited tensor (see :meth:`Edit.__call__`)."""
        table = self._tables.get(ctx.site.name)
        if table is None:
            raise InterventionError(f"patch at {ctx.site.name} was never checked")
        values, lengths = table
        tokens = ctx.tokens
        batch = tokens.shape[0]
        if values.shape[0] not in (1, batch):
            raise InterventionError(
                f"patch source holds {values.shape[0]} texts but the forward pass has {batch}; "
                "give one text (applied to every row) or one per row"
            )
        rows = (
            torch.arange(batch)
            if values.shape[0] == batch
            else torch.zeros(batch, dtype=torch.long)
        )
        lengths = lengths[rows].to(tokens.lengths.device)
        if tokens.past == 0 and not torch.equal(lengths, tokens.lengths):
            raise InterventionError(
                f"patch source has token counts {lengths.tolist()} but the run has "
                f"{tokens.lengths.tolist()}; patch between prompts of equal length"
            )
        values = values.to(device=hidden.device, dtype=hidden.dtype)
        rows = rows.to(hidden.device)
        inside = tokens.positions < lengths.unsqueeze(-1)
        picked = values[rows.unsqueeze(-1), tokens.positions.clamp(0, values.shape[1] - 1)]
        select = self.positions.select(tokens) & inside
        return _where(select, picked, hidden)


def patch(source: Any, positions: PositionSpec = "all", site: str | None = None) -> Patch:
    """Replaces the site's values by those of another run (activation patching).

    Token ``p`` of text ``i`` in the edited pass gets token ``p`` of source text ``i`` (or of the
    only source text, which then applies to every row). On an uncached pass every text must have
    the source text's token count; under cached generation, positions past the source's length
    (generated tokens) are left as they are.

    Args:
        source: :class:`~workbench.Activations` captured (``positions="all"``) at this site on
            the same model, or a tensor ``(n_tokens, d)`` (one text) or ``(texts, n_tokens, d)``.
        positions: Which tokens to patch.
        site: Take the values from this site of ``source`` instead of the edited site's name.

    Note:
        Rows are matched to source texts in batch order, so a multi-text source suits plain
        forward passes; :func:`~workbench.capturing` sorts texts by length into batches.
    """
    if isinstance(source, np.ndarray):
        source = torch.from_numpy(source)
    if isinstance(source, Tensor):
        if source.dim() not in (2, 3) or 0 in source.shape:
            raise InterventionError(
                f"patch source tensor must be (n_tokens, d) or (texts, n_tokens, d), got shape "
                f"{tuple(source.shape)}"
            )
    elif not isinstance(source, Activations):
        raise InterventionError(
            f"patch source must be Activations or a tensor, got {type(source).__name__}"
        )
    return Patch(source, Positions.parse(positions), site)


@dataclass(frozen=True, eq=False)
class Skip(Edit):
    """Replaces block ``L``'s output by its input (see :func:`skip`)."""

    def check(self, site: Site, subject: Subject) -> None:
        """See :meth:`Edit.check`."""
        if site.kind != "resid_post":
            raise InterventionError(
                f"skip() applies to a block's output, 'resid_post.L'; got {site.name!r}"
            )

    def __call__(self, hidden: Tensor, ctx: EditContext) -> Tensor:
        """Returns the edited tensor (see :meth:`Edit.__call__`)."""
        if ctx.block_input is None:
            raise InterventionError(f"skip() at {ctx.site.name} saw no block input")
        if ctx.block_input.shape != hidden.shape:
            raise InterventionError(
                f"skip() at {ctx.site.name}: block input {tuple(ctx.block_input.shape)} and "
                f"output {tuple(hidden.shape)} differ"
            )
        # on a placed model the block's input may still be on the previous block's device
        return ctx.block_input.to(hidden.device)


def skip() -> Skip:
    """Removes a block: ``resid_post.L`` becomes ``resid_pre.L``, block ``L``'s input.

    Only ``resid_post.L`` sites accept it (in families whose ``resid_pre.L`` reads the input of
    the same module). The block still runs (its cache entries are unused); everything after it
    sees the model with block ``L`` deleted. Compose it after an edit at ``resid_pre.L`` to skip
    the block *and* keep that edit.
    """
    return Skip()


@dataclass(frozen=True, eq=False)
class Apply(Edit):
    """Calls ``fn(hidden, ctx)`` (see :func:`apply`)."""

    fn: Callable[[Tensor, EditContext], Tensor]
    name: str = ""

    def __call__(self, hidden: Tensor, ctx: EditContext) -> Tensor:
        """Returns the edited tensor (see :meth:`Edit.__call__`)."""
        return self.fn(hidden, ctx)


def apply(fn: Callable[[Tensor, EditContext], Tensor]) -> Apply:
    """Any edit: ``fn(hidden, ctx)`` returns the new ``(batch, pos, d)`` tensor.

    Args:
        fn: Receives the site's tensor and the :class:`EditContext`; must not change the shape.
            Use ``ctx.tokens`` (a :class:`~workbench.interventions.positions.TokenPass`) to
            find token positions, and avoid in-place writes so gradients stay right.
    """
    if not callable(fn):
        raise InterventionError(
            f"apply() needs a callable fn(hidden, ctx), got {type(fn).__name__}"
        )
    return Apply(fn, getattr(fn, "__name__", type(fn).__name__))


def as_edit(value: Any, key: str) -> Edit:
    """An :class:`Edit` from an edit or a plain callable ``fn(hidden, ctx)``."""
    if isinstance(value, Edit):
        return value
    if callable(value):
        return apply(value)
    raise InterventionError(
        f"edit for {key!r} must be add(), ablate(), project_out(), patch(), skip(), apply() or a "
        f"callable fn(hidden, ctx); got {type(value).__name__}"
    )
