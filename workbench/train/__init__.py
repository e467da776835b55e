"""The one deterministic toy trainer: ``train(model, TrainConfig(...), loss_fn=..., data=...)``.

Every model the workbench trains itself (the embedded ``tiny-lm``, the graph-memorizing
transformer, the two-channel conflict decoder, the teacher-student residual toys, the multi-agent
LM) goes through :func:`train`, so they share one recipe and one set of guarantees:

- **AdamW** (Loshchilov & Hutter, 2019, *Decoupled Weight Decay Regularization*) on the
  parameters that have ``requires_grad``; frozen ones stay bitwise unchanged.
- **Linear warm-up, then cosine decay** to a floor (Loshchilov & Hutter, 2017, *SGDR*):
  ``lr(s) = lr * (s + 1) / warmup`` for ``s < warmup``, then
  ``lr * (r + (1 - r) * (1 + cos(pi * (s - warmup) / (steps - warmup))) / 2)`` with floor ratio
  ``r`` (:meth:`TrainConfig.lr_at`).
- **Global gradient-norm clipping** (Pascanu et al., 2013), with the pre-clip norm of every step
  recorded.
- **Batches**: the full data every step, seeded-permutation minibatches over tensors, or a
  ``sample(step, generator)`` function for streams. One CPU generator seeded with ``seed`` is the
  only source of data randomness; ``torch.manual_seed(seed)`` precedes a model factory, so the
  same seed and inputs give bitwise identical weights on CPU.
- **Checkpoints** at chosen steps (:func:`log_steps` gives 0, 10, 20, 50, 100, ...; step 0 is the
  initialization), saved as safetensors + JSON, or by a hook (``save_pretrained``); a run writes
  into a hidden temporary folder renamed into place when it finishes, so an interrupted run leaves
  nothing half-written. Without ``out`` the checkpoints are kept in memory.
- A frozen :class:`TrainResult` (losses, gradient norms, evaluations, checkpoints, seconds) with
  ``to_dict()`` and ``figure()``.

Examples (``F`` is ``torch.nn.functional``)::

    from workbench.train import TrainConfig, log_steps, train

    # 1. Graph memorization: ~100 edge sequences, full batch, log-spaced checkpoints in memory.
    #    The associative control freezes a random embedding table: only requires_grad is trained.
    def lm_loss(model, ids):
        return model(input_ids=ids, labels=ids).loss

    def build():
        model = GPT2LMHeadModel(small_config)
        if control:
            model.transformer.wte.weight.requires_grad_(False)
        return model

    result = train(build, TrainConfig(steps=3000, lr=1e-3, checkpoints=log_steps(3000)),
                   data=sequences, loss_fn=lm_loss)                 # sequences: (100, L) ids
    embeddings = result.checkpoint(3000).state["transformer.wte.weight"]

    # 2. Two-channel conflict decoder: minibatches of (inputs, answers), accuracy as evaluation.
    result = train(decoder, TrainConfig(steps=2000, batch_size=64, eval_every=100),
                   data=(x, y), loss_fn=lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                   evaluate=lambda m: {"acc": (m(x_val).argmax(-1) == y_val).float().mean()})

    # 3. Teacher-student residual toys: KL to precomputed teacher log-probabilities.
    def kl(model, batch):
        x, teacher_logp = batch
        return F.kl_div(model(x).log_softmax(-1), teacher_logp, log_target=True,
                        reduction="batchmean")

    result = train(lambda: ResidualMLP(depth=8, tied=True), TrainConfig(steps=5000, batch_size=256),
                   data=(x, teacher_logp), loss_fn=kl, out="runs/toy-tied")

    # 4. A stream (tiny-lm, the multi-agent LM): random windows of a token stream.
    def windows(step, generator):
        starts = torch.randint(0, len(stream) - 129, (8,), generator=generator)
        return torch.stack([stream[s : s + 128] for s in starts.tolist()])

    train(build_lm, TrainConfig(steps=1000, lr=3e-3, warmup=50, checkpoints=log_steps(1000)),
          sample=windows, loss_fn=lm_loss, out=folder,
          save=lambda model, path, record: model.save_pretrained(path))
"""

from workbench.train.checkpoints import load_checkpoint, save_state_dict
from workbench.train.config import TrainConfig, log_steps
from workbench.train.loop import train
from workbench.train.result import Checkpoint, EvalRecord, TrainResult

__all__ = [
    "Checkpoint",
    "EvalRecord",
    "TrainConfig",
    "TrainResult",
    "load_checkpoint",
    "log_steps",
    "save_state_dict",
    "train",
]
