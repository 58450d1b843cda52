"""slm: a small decoder-only transformer in NumPy whose forward pass can be read against the equations."""

from . import attribution, interventions, layers, roles
from .config import Config
from .generate import Step, generate, sampling_distribution
from .lesson import LESSON_VOCAB, CausalLanguageModel
from .model import KVCache, LayerTrace, Model, Trace
from .params import count_params, init_params, param_shapes
from .pretrained import load_pretrained, tokenizer_for
from .tokenizer import Encoding, WordTokenizer

__all__ = [
    "LESSON_VOCAB", "CausalLanguageModel", "Config", "Encoding", "KVCache", "LayerTrace", "Model", "Step",
    "Trace", "WordTokenizer", "attribution", "count_params", "generate", "init_params", "interventions", "layers",
    "load_pretrained", "param_shapes", "roles", "sampling_distribution", "tokenizer_for",
]
