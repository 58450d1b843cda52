"""slm: a small decoder-only transformer in NumPy whose forward pass can be read against the equations."""

from . import attribution, bpe, hooks, interventions, layers, roles
from .config import Config
from .generate import Step, generate, generate_batch, sampling_distribution
from .hooks import ActivationCache, HookPoint
from .lesson import LESSON_VOCAB, CausalLanguageModel
from .loading import load, load_pretrained, tokenizer_for
from .model import KVCache, LayerTrace, Model, Trace
from .params import count_params, init_params, param_shapes
from .tokenizer import Encoding, WordTokenizer

__all__ = [
    "LESSON_VOCAB", "ActivationCache", "CausalLanguageModel", "Config", "Encoding", "HookPoint", "KVCache",
    "LayerTrace", "Model", "Step", "Trace", "WordTokenizer", "attribution", "bpe", "count_params", "generate",
    "generate_batch", "hooks", "init_params", "interventions", "layers", "load", "load_pretrained", "param_shapes",
    "roles", "sampling_distribution", "tokenizer_for",
]
