"""slm.train: training the shipped model in NumPy (backward pass, AdamW, schedule, loop, metrics).

Run `python -m slm.train --help` (with PYTHONPATH=py). Nothing here is needed to run a model.
"""

from .backward import backward, cross_entropy, loss_and_grads, next_token_targets

__all__ = ["backward", "cross_entropy", "loss_and_grads", "next_token_targets"]
