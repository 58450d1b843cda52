#!/usr/bin/env python3
"""Generation speed of real-size models in the browser's Python, against PyTorch on one thread, in one run.

    python bench/wasm_generation_bench.py --pyodide-packages DIR [--old-rev REV] [--rounds 3]

Runs slm in the npm Pyodide under Node (the V8 engine Chromium runs the site's wasm with) with the real wasm
NumPy from DIR, its products through the site's SIMD kernel as built from this tree (and, with --old-rev, from that
commit's gemm.wat), on random float32 weights of GPT-2 small's shape (124M) and a 135M Llama shape (SmolLM2-135M's).
Each round generates 64 new tokens greedily after an 8-token prompt; the rate is the steady state after the first
token. PyTorch (transformers, float32, one thread, KV cache) runs the same shapes in CPython between the rounds.
Also prints the GB/s of weights the generation streams, a single weight product's GB/s by kernel path, and this
machine's memory bandwidth (NumPy copying 256 MB in CPython). Prints Markdown rows for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))
from sitebuild import kernels  # noqa: E402
from sitebuild.fetch import fetch_pyodide  # noqa: E402
from sitebuild.lock import read_lock  # noqa: E402

PROMPT, NEW = 8, 64
SHAPES = {
    "GPT-2 small (124M)": dict(n_vocab=50257, n_ctx=1024, n_model=768, n_heads=12, n_layers=12, d_ff=3072,
                               activation="gelu", norm="layer", positions="learned", bias=True, tied=True),
    "SmolLM2-135M shape": dict(n_vocab=49152, n_ctx=2048, n_model=576, n_heads=9, n_kv_heads=3, n_layers=30,
                               d_ff=1536, activation="swiglu", norm="rms", positions="rope", rope_base=100000.0,
                               tied=True),
}

RUNNER = r"""
const { loadPyodide } = require(process.argv[2] + "/pyodide.js");
const fs = require("fs");
(async () => {
  const py = await loadPyodide({ indexURL: process.argv[2] + "/" });
  await py.loadPackage(process.argv[3]);
  py.FS.mkdirTree("/host");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: process.argv[4] }, "/host");
  await py.runPythonAsync(fs.readFileSync(process.argv[4] + "/run.py", "utf8"));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
"""

IN_PYODIDE = r"""
import json, sys, time
job = json.load(open("/host/job.json"))
sys.path.insert(0, f"/host/{job['variant']}/py")
import numpy as np
import slm
from slm import matmul
from slm.params import init_params
cfg = slm.Config(**job["shape"])
model = slm.Model(cfg, init_params(cfg, seed=0, dtype=np.float32))
out = {"params": sum(v.size for v in model.params.values())}
for kernel in (True, False) if job["einsum"] else (True,):
    matmul.use_kernel(f"/host/{job['variant']}/gemm.wasm" if kernel else None)
    new = job["new"] if kernel else 4
    stamps = []
    for step in slm.generate(model, list(range(1, job["prompt"] + 1)), new, top_k=1):
        stamps.append(time.perf_counter())
    out["tokens/s" if kernel else "einsum"] = (len(stamps) - 1) / (stamps[-1] - stamps[0])
# one weight product: a token's row times the tied unembedding (V, d) read in place, and the same weight stored
# (d, V) row-major
matmul.use_kernel(f"/host/{job['variant']}/gemm.wasm")
x = np.ones((1, cfg.n_model), np.float32)
emb = model.params["tok_emb"]
for layout, w in (("W^T in place", emb.T), ("row-major", np.ascontiguousarray(emb.T))):
    times = []
    for _ in range(5):
        t = time.perf_counter(); matmul.matmul(x, w); times.append(time.perf_counter() - t)
    out[f"unembedding {layout} GB/s"] = emb.nbytes / min(times) / 1e9
open("/host/out.json", "w").write(json.dumps(out))
"""


def wasm_rates(pkg: Path, numpy_wheel: Path, host: Path, shape: dict, variant: str, einsum: bool) -> dict:
    (host / "job.json").write_text(json.dumps({"shape": shape, "variant": variant, "einsum": einsum,
                                               "prompt": PROMPT, "new": NEW}))
    proc = subprocess.run(["node", str(host / "runner.cjs"), str(pkg), str(numpy_wheel), str(host)],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads((host / "out.json").read_text())


def torch_rate(shape: dict) -> float:
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if shape["norm"] == "layer":
        config = transformers.GPT2Config(vocab_size=shape["n_vocab"], n_positions=shape["n_ctx"],
                                         n_embd=shape["n_model"], n_layer=shape["n_layers"], n_head=shape["n_heads"])
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=shape["n_vocab"], hidden_size=shape["n_model"], intermediate_size=shape["d_ff"],
            num_hidden_layers=shape["n_layers"], num_attention_heads=shape["n_heads"],
            num_key_value_heads=shape["n_kv_heads"], max_position_embeddings=shape["n_ctx"],
            rope_theta=shape["rope_base"], tie_word_embeddings=True)
        model = transformers.LlamaForCausalLM(config)
    model.eval()
    with torch.inference_mode():
        ids = torch.arange(1, PROMPT + 1)[None]
        out = model(ids, use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        stamps = [time.perf_counter()]
        for _ in range(NEW - 1):
            out = model(token, past_key_values=past, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            stamps.append(time.perf_counter())
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def memory_bandwidth() -> float:
    """GB/s of a 256 MB NumPy copy (bytes read + written), best of 5."""
    src = np.ones(64 << 20, np.float32)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return 2 * src.nbytes / best / 1e9


def _timed(fn) -> float:  # noqa: ANN001
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyodide-packages", type=Path, required=True, help="folder with the wasm NumPy wheel")
    ap.add_argument("--old-rev", help="also run this commit's gemm.wat")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--einsum", action="store_true", help="also the plain path (4 tokens: it is slow)")
    args = ap.parse_args()
    numpy_wheel = next(args.pyodide_packages.glob("numpy-*wasm32.whl"))
    lock = read_lock()
    pkg = fetch_pyodide(lock)
    with tempfile.TemporaryDirectory() as tmp:
        host = Path(tmp)
        (host / "runner.cjs").write_text(RUNNER)
        (host / "run.py").write_text(IN_PYODIDE)
        shutil.copytree(ROOT / "py" / "slm", host / "new" / "py" / "slm", ignore=shutil.ignore_patterns("__pycache__"))
        source = kernels.KERNELS[kernels.GEMM]
        (host / "new" / "gemm.wasm").write_bytes(kernels.side_module(kernels.assembled(source, lock)))
        variants = ["new"]
        if args.old_rev:  # that commit's slm and kernel
            (host / "old").mkdir()
            archive = subprocess.run(["git", "archive", args.old_rev, "py/slm", "site/src/worker/gemm.wat"], cwd=ROOT,
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(host / "old")], input=archive, check=True)
            old_wat = host / "old" / "site" / "src" / "worker" / "gemm.wat"
            (host / "old" / "gemm.wasm").write_bytes(kernels.side_module(kernels.assembled(old_wat, lock)))
            variants.append("old")
        rows = []
        for label, shape in SHAPES.items():
            runs: dict[str, list[float]] = {}
            for r in range(args.rounds):
                got = {}
                for variant in variants:
                    rates = wasm_rates(pkg, numpy_wheel, host, shape, variant, args.einsum and variant == "new")
                    got["params"] = rates.pop("params")
                    got.update({(k if variant == "new" else f"{variant} {k}"): v for k, v in rates.items()})
                got["torch"] = torch_rate(shape)
                print(f"[bench] {label} round {r + 1}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in got.items() if k != "params"), flush=True)
                for k, v in got.items():
                    runs.setdefault(k, []).append(v)
            med = {k: statistics.median(v) for k, v in runs.items()}
            weight_gb = med["params"] * 4 / 1e9
            rows.append((label, med, weight_gb))
        bandwidth = memory_bandwidth()
    print(f"\nmemory bandwidth (NumPy copying 256 MB, read + write, CPython): {bandwidth:.1f} GB/s\n")
    print("| shape | tokens/s in wasm | GB/s of weights streamed | PyTorch, 1 thread | ratio | other paths |")
    print("|---|---|---|---|---|---|")
    for label, med, gb in rows:
        others = "; ".join(f"{k} {v:.2f}" for k, v in med.items() if k not in ("params", "tokens/s", "torch"))
        print(f"| {label}, {med['params'] / 1e6:.0f}M | {med['tokens/s']:.2f} | {med['tokens/s'] * gb:.2f} | "
              f"{med['torch']:.2f} | {med['tokens/s'] / med['torch']:.2f}× | {others} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
