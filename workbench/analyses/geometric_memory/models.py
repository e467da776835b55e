"""The models the study trains: a tiny GPT-2, the paper's tied Node2Vec, their losses.

The sequence model is a transformers ``GPT2LMHeadModel`` built from an explicit config (pre-layer
norm, learned positions, one head, no dropout), so the workbench's hook sites (``hooks/gpt2.toml``),
capture and lenses work on it unchanged. The release's tiny runs use a nanoGPT-style model of the
same shape (the GPT-2 recipe with a task token and without the pause token).

The paper's tied Node2Vec (its Section on the Node2Vec connection) is one embedding table ``E``
trained on the full-softmax one-hop neighbour loss

    L(E) = - sum_u mean_{v in N(u)} log softmax_w(<e_u, e_w>)[v],

with the same table on both sides of the dot product; the release trains it by full-batch
gradient descent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.analyses.geometric_memory.sequences import IGNORE


@dataclass(frozen=True)
class TransformerSpec:
    """The shape of the sequence model and the settings of its edge memorization.

    Attributes:
        vocab: Vocabulary size (nodes and special tokens).
        positions: Longest sequence.
        d_model: Width.
        n_layers: Blocks.
        tied: Input and output embeddings tied.
        frozen: Freeze the input embedding table (the associative control; with tied embeddings
            the output table is the same tensor).
    """

    vocab: int
    positions: int
    d_model: int
    n_layers: int
    tied: bool = True
    frozen: bool = False


def build_transformer(spec: TransformerSpec) -> torch.nn.Module:
    """A random-init ``GPT2LMHeadModel`` of the given shape (call after seeding torch)."""
    from workbench.models import quiet_transformers
    from workbench.models.gpt2 import tiny_gpt2

    quiet_transformers()
    model = tiny_gpt2(spec.vocab, spec.positions, spec.d_model, spec.n_layers, tied=spec.tied)
    if spec.frozen:
        model.transformer.wte.weight.requires_grad_(False)
    return model


def lm_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Next-token cross entropy on the positions whose label is not ``IGNORE``."""
    ids, labels = batch
    logits = model(input_ids=ids).logits
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE
    )


class TiedNode2Vec(torch.nn.Module):
    """One embedding table on both sides of the neighbour softmax (the paper's tied Node2Vec).

    Args:
        n_nodes: Nodes.
        dim: Embedding dimension.
        std: Standard deviation of the normal initialization.
    """

    def __init__(self, n_nodes: int, dim: int, std: float = 0.1) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_nodes, dim) * std)

    def forward(self, targets: torch.Tensor) -> torch.Tensor:
        """The mean neighbour loss; ``targets`` is ``(n, n)``, each row a distribution."""
        logp = torch.log_softmax(self.weight @ self.weight.T, dim=1)
        return -(targets * logp).sum(1).mean()


def neighbour_targets(adjacency: torch.Tensor) -> torch.Tensor:
    """Row-normalized adjacency: node ``u``'s row is uniform over its neighbours."""
    a = adjacency.double()
    return (a / a.sum(1, keepdim=True).clamp_min(1)).float()
