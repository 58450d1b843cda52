"""A nanoGPT checkpoint (`ckpt.pt`) to slm's model file (`.npz`, docs/slm.md), on the command line:

    python -m slm.convert ckpt.pt out.npz --meta meta.pkl                           # a character model
    python -m slm.convert ckpt.pt out.npz --vocab vocab.json --merges merges.txt    # GPT-2's BPE

Reading the checkpoint needs PyTorch (on the machine that converts only: the `.npz` loads with NumPy alone). A
checkpoint holds no tokenizer, so one of the two tokenizer sources is required: nanoGPT's `meta.pkl` (the
character table its `prepare.py` writes) or GPT-2's `vocab.json` and `merges.txt`.

nanoGPT's model is slm's pre-norm layer-norm block with learned positions, exact GELU (`gelu_erf`), 4·d hidden
units, the unembedding tied to the token embedding, and biases everywhere or nowhere (`bias`). Its Linear weights
are (out, in).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from . import bpe
from .config import Config
from .model import Model
from .tokenizer import CharTokenizer

MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias")


def config_from_model_args(args: dict[str, Any]) -> Config:
    missing = [k for k in MODEL_ARGS if k not in args]
    if missing:
        raise ValueError(f"model_args lacks {', '.join(missing)}: not a nanoGPT checkpoint?")
    try:
        return Config(n_vocab=args["vocab_size"], n_ctx=args["block_size"], n_model=args["n_embd"],
                      n_heads=args["n_head"], n_layers=args["n_layer"], activation="gelu_erf", norm="layer",
                      norm_placement="pre", positions="learned", bias=bool(args["bias"]), tied=True, eps=1e-5)
    except ValueError as exc:
        raise ValueError(f"model_args: {exc}") from None


def params_from_state_dict(cfg: Config, state: dict[str, np.ndarray]) -> tuple[Config, dict[str, np.ndarray]]:
    """slm's parameters from nanoGPT's state dict (NumPy arrays; `_orig_mod.` prefixes of torch.compile removed).
    Returns the config too: untied when lm_head differs from the token embedding."""
    state = {k.removeprefix("_orig_mod."): np.asarray(v, dtype=np.float32) for k, v in state.items()}
    d, used = cfg.n_model, set()

    def take(key: str) -> np.ndarray:
        if key not in state:
            raise ValueError(f"the checkpoint's model has no {key} (model_args: {cfg.n_layers} layers, bias "
                             f"{cfg.bias})")
        used.add(key)
        if not np.isfinite(state[key]).all():
            raise ValueError(f"the checkpoint's tensor {key} holds NaN or infinite values")
        return state[key]

    def bias(key: str, size: int) -> np.ndarray:  # nanoGPT's LayerNorm has no bias when bias=False
        return take(key) if cfg.bias else np.zeros(size, np.float32)

    t = "transformer"
    params = {"tok_emb": take(f"{t}.wte.weight"), "pos_emb": take(f"{t}.wpe.weight"),
              "norm_f.weight": take(f"{t}.ln_f.weight"), "norm_f.bias": bias(f"{t}.ln_f.bias", d)}
    for i in range(cfg.n_layers):
        h, b = f"{t}.h.{i}", f"blocks.{i}"
        qkv = take(f"{h}.attn.c_attn.weight")  # (3d, d): rows are q's, then k's, then v's output units
        params.update({f"{b}.attn.w_q": qkv[:d], f"{b}.attn.w_k": qkv[d:2 * d], f"{b}.attn.w_v": qkv[2 * d:],
                       f"{b}.attn.w_o": take(f"{h}.attn.c_proj.weight"),
                       f"{b}.ffn.w_in": take(f"{h}.mlp.c_fc.weight").T,
                       f"{b}.ffn.w_out": take(f"{h}.mlp.c_proj.weight").T})
        for norm, ln in (("norm1", "ln_1"), ("norm2", "ln_2")):
            params[f"{b}.{norm}.weight"] = take(f"{h}.{ln}.weight")
            params[f"{b}.{norm}.bias"] = bias(f"{h}.{ln}.bias", d)
        if cfg.bias:
            qkv_b = take(f"{h}.attn.c_attn.bias")
            params.update({f"{b}.attn.b_q": qkv_b[:d], f"{b}.attn.b_k": qkv_b[d:2 * d],
                           f"{b}.attn.b_v": qkv_b[2 * d:], f"{b}.attn.b_o": take(f"{h}.attn.c_proj.bias"),
                           f"{b}.ffn.b_in": take(f"{h}.mlp.c_fc.bias"), f"{b}.ffn.b_out": take(f"{h}.mlp.c_proj.bias")})
    head = take("lm_head.weight")
    if not np.array_equal(head, params["tok_emb"]):  # nanoGPT ties them; a variant that does not keeps its own
        cfg = cfg.replace(tied=False)
        params["unembed"] = head.T
    extra = sorted(k for k in state if k not in used and not k.endswith(".attn.bias"))  # .attn.bias: a causal mask
    if extra:
        raise ValueError(f"the checkpoint has tensors nanoGPT's model does not: {', '.join(extra[:5])}")
    return cfg, {k: np.ascontiguousarray(v) for k, v in params.items()}


def char_tokenizer(meta_pkl: str | Path) -> CharTokenizer:
    """nanoGPT's character table: meta.pkl holds {"vocab_size", "itos": {id: char}, "stoi": {char: id}}."""
    with open(meta_pkl, "rb") as f:
        meta = pickle.load(f)  # the user's own file, on their own machine
    try:
        itos = meta["itos"]
        return CharTokenizer([itos[i] for i in range(len(itos))])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{Path(meta_pkl).name}: not nanoGPT's meta.pkl (expected an 'itos' table: {exc})") from None


def convert(ckpt: str | Path, meta_pkl: str | Path | None = None, vocab: str | Path | None = None,
            merges: str | Path | None = None, name: str | None = None) -> Model:
    """The Model in a nanoGPT checkpoint, with the tokenizer from meta.pkl or vocab.json + merges.txt."""
    import torch  # only here: slm itself never needs PyTorch

    bpe_files = (vocab, merges)
    if (meta_pkl is None) == (None in bpe_files) or (meta_pkl is not None and bpe_files != (None, None)):
        raise ValueError("give the tokenizer: either meta.pkl, or both vocab.json and merges.txt")
    tokenizer = (char_tokenizer(meta_pkl) if meta_pkl is not None
                 else bpe.from_gpt2_files(Path(vocab).read_bytes(), Path(merges).read_bytes()))
    try:
        checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a file that is not a checkpoint
        raise ValueError(f"{Path(ckpt).name}: not a PyTorch checkpoint torch.load can read safely ({exc})") from None
    if not isinstance(checkpoint, dict) or "model" not in checkpoint or "model_args" not in checkpoint:
        raise ValueError(f"{Path(ckpt).name}: not a nanoGPT checkpoint (expected the keys 'model' and 'model_args')")
    cfg = config_from_model_args(checkpoint["model_args"])
    state = {k: v.detach().to(torch.float32).numpy() for k, v in checkpoint["model"].items()}
    cfg, params = params_from_state_dict(cfg, state)
    if len(tokenizer.vocab) > cfg.n_vocab:
        raise ValueError(f"the tokenizer has {len(tokenizer.vocab)} tokens, the model's vocab_size is {cfg.n_vocab}")
    step = checkpoint.get("iter_num")
    source = f"nanoGPT checkpoint {Path(ckpt).name}" + (f" (iteration {int(step)})" if step is not None else "")
    meta = {"name": name or Path(ckpt).stem, "source": source}
    return Model(cfg, params, meta, tokenizer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slm.convert", description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt", help="nanoGPT's ckpt.pt")
    parser.add_argument("out", help="the .npz to write")
    parser.add_argument("--meta", help="nanoGPT's meta.pkl (a character model's table)")
    parser.add_argument("--vocab", help="GPT-2's vocab.json (with --merges)")
    parser.add_argument("--merges", help="GPT-2's merges.txt (with --vocab)")
    parser.add_argument("--name", help="the name the page shows (default: the checkpoint's file name)")
    args = parser.parse_args(argv)
    try:
        model = convert(args.ckpt, args.meta, args.vocab, args.merges, args.name)
    except (ValueError, OSError) as exc:
        print(f"slm.convert: {exc}", file=sys.stderr)
        return 1
    model.save(args.out)
    n = sum(v.size for v in model.params.values())
    print(f"wrote {args.out}: {n / 1e6:.2f}M parameters, {model.cfg.n_layers} layers, vocabulary {model.cfg.n_vocab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
