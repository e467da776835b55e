"""Lenses: what the residual stream at each layer already predicts about the next token.

A *lens* decodes an intermediate residual vector ``h_l`` (``resid_post.l``) into a next-token
distribution, so one can watch the prediction form layer by layer:

- :func:`logit_lens` (nostalgebraist 2020, "interpreting GPT: the logit lens"): ``h_l`` straight
  through the model's own final norm and unembedding, as if the remaining blocks were skipped.
- :func:`last_block_lens`: ``h_l`` through the *last block*, then the norm and unembedding; the
  block is run inside the model's real forward pass (an edit hook replaces its input), so its
  attention masks and rotary/position arguments are the model's own.
- :func:`activations_lens` / :meth:`TunedLens.read`: the same readouts on activations already
  captured (or read from a cache), at every row or a sample of rows, with no forward pass.
- :class:`TunedLens` / :func:`tuned_lens` (Belrose et al. 2023, "Eliciting Latent Predictions
  from Transformers with the Tuned Lens", arXiv 2303.08112): an affine translator per layer,
  trained to minimise KL(final || lens), in front of the same head. It corrects the change of
  basis between layers that makes the logit lens unreliable in early layers.

Every lens returns a :class:`LensResult`: per layer and position the top-k tokens and their
probabilities, the entropy, KL(final || lens), the cross-entropy against the next token and the
rank of a token the user names; ``kl_by_layer()`` / ``loss_by_layer()``; ``figure("heatmap")``
draws the classic lens picture and :func:`compare_figure` puts several lenses on one axis.

The head is whatever the family file's ``final_norm`` and ``unembed`` sites name
(``hooks/*.toml``), so every decoder family the workbench knows works, with no
per-architecture code; encoders (no ``unembed`` site) get a :class:`LensError` before any work.

Example::

    from workbench import load_model
    from workbench.lens import TunedLens, compare_figure, logit_lens

    subject = load_model("tiny-lm")
    lens = TunedLens.train(subject, "builtin:pydoc", n_texts=400)
    texts = ["The return statement leaves the current function call."]
    results = [logit_lens(subject, texts), lens.apply(subject, texts)]
    results[0].figure("heatmap")
    compare_figure(results, metric="kl")
"""

from __future__ import annotations

from workbench.lens.core import LensError
from workbench.lens.figures import compare_figure
from workbench.lens.readouts import activations_lens, last_block_lens, logit_lens
from workbench.lens.results import LensResult
from workbench.lens.training import TunedLensTraining
from workbench.lens.tuned import TunedLens, tuned_lens

__all__ = [
    "LensError",
    "LensResult",
    "TunedLens",
    "TunedLensTraining",
    "activations_lens",
    "compare_figure",
    "last_block_lens",
    "logit_lens",
    "tuned_lens",
]
