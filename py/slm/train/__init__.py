"""slm.train: training the shipped model in NumPy (backward pass, AdamW, schedule, loop, metrics).

Run `python -m slm.train --help` (with PYTHONPATH=py; docs/training.md). Nothing here is needed to run a model.

    backward(model, trace, targets=True)      gradients named like model.params, from a forward Trace
    loss_and_grads(model, tokens, lengths)    forward + mean next-token cross-entropy + backward
    AdamW, clip_gradients, lr_at              the optimiser, global-norm clipping, warmup + cosine
    train_step(model, optimizer, batch, lr)   one step: forward, backward, clip, AdamW (the loop's and the lab's)
    TrainConfig, train                        a whole seeded run (slm.train.loop)
    slm.train.evaluate                        the model card's held-out metrics
    slm.train.tasks, slm.train.lab            the training lab: tasks, presets, a run stepped in chunks
"""

from .backward import backward, cross_entropy, loss_and_grads, next_token_targets
from .loop import TrainConfig, train
from .optim import AdamW, clip_gradients, global_norm, lr_at
from .step import train_step

__all__ = [
    "AdamW", "TrainConfig", "backward", "clip_gradients", "cross_entropy", "global_norm", "loss_and_grads",
    "lr_at", "next_token_targets", "train", "train_step",
]
