"""A local mirror with the Hugging Face Hub's URL layout, for tests that must never reach the real Hub:
`/{owner}/{name}/resolve/{revision}/{file}`, the weights answered with a redirect to another path (as the Hub sends
its large files to a content host), CORS on every answer (the page's worker reads it from another origin), a
gated repository (401) and a missing file (404). Every request is recorded.

`gpt2_checkpoint()` makes a random-weight GPT-2 checkpoint with `transformers` and a BPE tokenizer trained by
`tokenizers`, as files {name: bytes}.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path


class Mirror:
    """repos: {owner/name: {revision: {file: bytes}}}; gated: repositories answered with 401."""

    def __init__(self, repos: dict[str, dict[str, dict[str, bytes]]], gated: tuple[str, ...] = (),
                 delay: float = 0.0) -> None:
        self.repos, self.gated, self.delay = repos, gated, delay
        self.blobs: dict[str, bytes] = {}
        self.requests: list[str] = []  # paths asked for, in order
        self.url = ""

    def weight_requests(self) -> list[str]:
        return [p for p in self.requests if p.endswith((".safetensors", ".gguf")) or p.startswith("/cdn/")]


def _handler(mirror: Mirror) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Access-Control-Expose-Headers", "Content-Length")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "GET":
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    # In pieces, with the mirror's delay between them: a download long enough to see and cancel.
                    for at in range(0, len(body), 1 << 18):
                        if mirror.delay:
                            time.sleep(mirror.delay)
                        self.wfile.write(body[at:at + (1 << 18)])

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            mirror.requests.append(path)
            if path.startswith("/cdn/"):
                blob = mirror.blobs.get(path.removeprefix("/cdn/"))
                self._send(200, blob) if blob is not None else self._send(404)
                return
            owner, _, rest = path.lstrip("/").partition("/")
            name, _, rest = rest.partition("/resolve/")
            revision, _, file = rest.partition("/")
            repo = f"{owner}/{name}"
            if repo in mirror.gated:
                self._send(401, b"Access to this model is restricted.")
                return
            data = mirror.repos.get(repo, {}).get(revision, {}).get(file)
            if data is None:
                self._send(404, b"Entry not found")
                return
            if file.endswith((".safetensors", ".gguf")):
                digest = hashlib.sha256(data).hexdigest()
                mirror.blobs[digest] = data
                self._send(302, headers={"Location": f"/cdn/{digest}"})
                return
            self._send(200, data)

        do_HEAD = do_GET

    return Handler


@contextlib.contextmanager
def serving(mirror: Mirror) -> Iterator[Mirror]:
    """The mirror on 127.0.0.1 (its base URL in `mirror.url`) while the block runs."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(mirror))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    mirror.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()


def gpt2_checkpoint(folder: Path, n_layer: int = 2, n_embd: int = 32, n_head: int = 4, vocab_size: int = 300,
                    n_positions: int = 64, model_vocab: int | None = None) -> dict[str, bytes]:
    """A random-weight GPT-2 checkpoint saved by `transformers` (float32 safetensors) with a trained byte-level BPE
    tokenizer.json: {file name: bytes}. `model_vocab`: embedding rows beyond the tokenizer's (GPT-2's 50,257)."""
    import torch
    import transformers

    from testkit.trained_tokenizers import gpt2_style

    torch.manual_seed(0)
    tokenizer = gpt2_style(vocab_size=vocab_size)
    cfg = transformers.GPT2Config(vocab_size=max(model_vocab or 0, tokenizer.get_vocab_size()), n_embd=n_embd,
                                  n_layer=n_layer, n_head=n_head, n_positions=n_positions, bos_token_id=0,
                                  eos_token_id=0)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
