"""Sparse autoencoders on slm activations, in SAELens's conventions (docs/features.md).

    import slm, slm.sae
    model = slm.load("shipped")
    trainer = slm.sae.train(model)                    # gather at blocks.0.hook_resid_post, train the default preset
    sae = trainer.sae()                               # reads raw activations
    slm.sae.evaluate(model, sae, slm.sae.corpus_windows(model, 200, seed=1))   # fve, l0, dead, ce_recovered, ...
    slm.sae.save(sae, "my_sae")                       # cfg.json + sae_weights.safetensors, as SAELens writes them

A UI drives `Trainer(gather(...), settings).step(n)` in chunks, `FeatureIndex.add(windows)` likewise, and calls
`logit_effect`, `prompt_features` / `firing` and `steer` per feature.
"""

from .activations import corpus_windows, default_hook, gather, metadata_for, speaks_grammar
from .core import SAE, loss_and_grads
from .features import Context, FeatureIndex, firing, logit_effect, prompt_features, steer, steering_hook
from .files import load, save, to_files
from .metrics import ce_metrics, cross_entropy, evaluate, reconstruction_metrics, splice_hook
from .train import DEFAULT_WINDOWS, PRESETS, Settings, Trainer, settings_with, train

__all__ = [
    "DEFAULT_WINDOWS", "PRESETS", "SAE", "Context", "FeatureIndex", "Settings", "Trainer", "ce_metrics",
    "corpus_windows", "cross_entropy", "default_hook", "evaluate", "firing", "gather", "load", "logit_effect",
    "loss_and_grads", "metadata_for", "prompt_features", "reconstruction_metrics", "save", "settings_with",
    "speaks_grammar", "splice_hook", "steer", "steering_hook", "to_files", "train",
]
