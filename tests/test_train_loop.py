"""The training loop and the command line, on tiny runs: determinism, learning, the files written."""

from __future__ import annotations

import json
import zlib

import numpy as np

from slm import Model
from slm.train import corpus
from slm.train.__main__ import compact, main, thin
from slm.train.data import TokenStream
from slm.train.loop import TrainConfig, train
from slm.train.plot import loss_curve_png

TINY = dict(n_layers=1, n_heads=2, n_model=16, n_ctx=16, steps=40, batch_size=8, lr=1e-2, warmup=5,
            train_tokens=20_000, valid_tokens=5_000, eval_every=20, eval_windows=16)


def test_same_seed_same_weights_and_the_loss_falls():
    a, curve_a = train(TrainConfig(**TINY))
    b, curve_b = train(TrainConfig(**TINY))
    for name in a.params:
        assert np.array_equal(a.params[name], b.params[name]), name
    assert curve_a.train_loss == curve_b.train_loss
    assert curve_a.valid_loss[-1] < curve_a.valid_loss[0] or curve_a.valid_loss[-1] < 0.9 * np.log(len(corpus.VOCAB))
    assert np.mean(curve_a.train_loss[-10:]) < np.mean(curve_a.train_loss[:5])
    c, _ = train(TrainConfig(**{**TINY, "seed": 1}))
    assert not np.array_equal(a.params["tok_emb"], c.params["tok_emb"])
    assert a.meta["vocab"] == list(corpus.VOCAB)
    assert a.meta["training"]["config"]["seed"] == 0


def test_windows_start_at_documents_when_asked():
    stream = TokenStream.generate("train", 5_000, seed=0)
    rng = np.random.default_rng(0)
    windows = stream.windows(rng, 50, 12, doc_start_fraction=1.0)
    assert (windows[:, 0] == corpus.TOKEN_ID[corpus.START]).all()
    mixed = stream.windows(rng, 400, 12, doc_start_fraction=0.5)
    assert 0.3 < (mixed[:, 0] == corpus.TOKEN_ID[corpus.START]).mean() < 0.8


def test_command_line_writes_weights_curves_and_metrics(tmp_path):
    out = tmp_path / "m.npz"
    flags = ["--n-layers", "1", "--n-heads", "2", "--n-model", "16", "--n-ctx", "16", "--steps", "20",
             "--batch-size", "8", "--train-tokens", "20000", "--valid-tokens", "5000", "--eval-every", "10",
             "--eval-windows", "16", "--no-progress", "--out", str(out)]
    assert main(flags) == 0
    model = Model.load(out)
    assert model.dtype == np.float32
    assert model.meta["vocab"] == list(corpus.VOCAB)
    training = model.meta["training"]
    assert training["command"].startswith("python -m slm.train --n-layers 1")
    layer, head = model.meta["pronoun_head"]
    assert 0 <= layer < 1 and 0 <= head < 2
    curve = json.loads((tmp_path / "m_loss.json").read_text())
    assert curve["valid_step"] == [10, 20] and len(curve["train_loss"]) == 20 and curve["every"] == 1
    png = (tmp_path / "m_loss.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"IEND" in png[-12:]
    assert (tmp_path / "m_metrics.json").exists()
    # the same command again reproduces the weights bit for bit; another seed does not
    assert main([*flags[:-1], str(tmp_path / "again.npz"), "--no-eval", "--verify-against", str(out)]) == 0
    assert main([*flags[:-1], str(tmp_path / "other.npz"), "--no-eval", "--seed", "1", "--verify-against",
                 str(out)]) == 1


def test_png_is_a_valid_image(tmp_path):
    curve = {"step": [1, 2, 3], "train_loss": [5.0, 4.0, 3.5], "valid_step": [3], "valid_loss": [3.7],
             "unigram_loss": 4.4}
    path = tmp_path / "c.png"
    loss_curve_png(curve, path, width=100, height=80)
    data = path.read_bytes()
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (100, 80)
    length = int.from_bytes(data[33:37], "big")
    assert data[37:41] == b"IDAT"
    raw = zlib.decompress(data[41: 41 + length])
    assert len(raw) == height * (1 + 3 * width)


def test_the_curve_file_is_thinned_and_rounded():
    n = 1234
    curve = {"step": list(range(1, n + 1)), "train_loss": [1.0 + (i % 2) / 3 for i in range(n)],
             "lr": [i / n for i in range(1, n + 1)], "grad_norm": [2.0] * n, "valid_step": [600, 1234],
             "valid_loss": [1.23456789, 1.1], "unigram_loss": 4.44444444, "seconds": 1.0}
    small = compact(thin(curve, max_points=500))
    assert small["every"] == 3 and len(small["step"]) == len(small["train_loss"]) == 412
    assert small["step"][:2] == [3, 6] and small["step"][-1] == n
    assert small["lr"][-1] == 1.0 and small["grad_norm"][0] == 2.0
    assert small["train_loss"][0] == round((1 + 4 / 3 + 1) / 3, 3)  # the mean of its block, 4 digits
    assert small["valid_loss"] == [1.235, 1.1] and small["unigram_loss"] == 4.444
    assert thin(curve, max_points=n)["train_loss"] == curve["train_loss"]
