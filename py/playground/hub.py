"""Models opened from the Hugging Face Hub by name (`?hf=owner/name`, the box in "Your models"): which files to ask
for, at which URLs, and each failure in words. Only weights are read: safetensors, or a named GGUF; never a pickle.

The URLs have the Hub's layout, `{hub}/{repo}/resolve/{revision}/{file}`, so a school's mirror with the same layout
works through `hub=`. The bytes come from a fetcher: in the browser the worker's `slmHub` (site/src/worker/hub.js:
progress, Cancel, and Cache Storage, from which the next visit opens the model), in CPython `urllib` (`panel
serve`). This module imports neither NumPy nor Panel: the site's builder reads the Hub's hosts here for the CSP.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The public Hub: the default base of every URL, and (with the hosts its file URLs redirect to) what the site's CSP
# lists in connect-src. The one place its hosts are written.
DEFAULT_HUB = "https://huggingface.co"
REDIRECT_HOSTS = ("https://*.huggingface.co", "https://*.hf.co")

REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}\.(safetensors|gguf)")
TOKENIZERS = (("tokenizer.json",), ("vocab.json", "merges.txt"))


class HubError(ValueError):
    """A file the Hub (or the mirror) did not give: the message names the repository, the file and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Cancelled(Exception):
    """The learner pressed Cancel."""


@dataclass(frozen=True)
class HubRef:
    repo: str
    revision: str = "main"
    hub: str = DEFAULT_HUB
    file: str | None = None  # a named weights file (a .gguf); None: config.json, the tokenizer, safetensors

    @classmethod
    def parse(cls, repo: str, revision: str | None = None, hub: str | None = None, file: str | None = None
              ) -> HubRef:
        """A checked reference; ValueError saying what is wrong with a name, a revision, a base URL or a file."""
        repo = (repo or "").strip().strip("/")
        if repo.startswith(("http://", "https://")):  # a pasted model page: https://<hub>/owner/name
            repo = "/".join(urllib.parse.urlsplit(repo).path.strip("/").split("/")[:2])
        if not REPO.fullmatch(repo) or ".." in repo:
            raise ValueError(f"{repo!r} is not a Hub model name: it is written owner/name, e.g. "
                             "openai-community/gpt2")
        revision = (revision or "main").strip()
        if not REVISION.fullmatch(revision) or ".." in revision:
            raise ValueError(f"{revision!r} is not a revision: a branch, a tag or a commit, e.g. main or step3000")
        hub = (hub or DEFAULT_HUB).strip().rstrip("/")
        parts = urllib.parse.urlsplit(hub)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"{hub!r} is not a Hub's address: give its base URL, e.g. https://hub.example.org")
        file = (file or "").strip() or None
        if file is not None and (not FILE.fullmatch(file) or ".." in file):
            raise ValueError(f"{file!r}: the page reads weights from .safetensors or .gguf files only")
        return cls(repo, revision, hub, file)

    def url(self, file: str) -> str:
        return (f"{self.hub}/{self.repo}/resolve/{urllib.parse.quote(self.revision, safe='')}/"
                f"{urllib.parse.quote(file)}")

    @property
    def label(self) -> str:
        """The model's name in the page: owner/name, with the revision when it is not main, and a named file."""
        name = self.repo + ("" if self.revision == "main" else f"@{self.revision}")
        return name + (f" ({self.file.rsplit('/', 1)[-1]})" if self.file else "")

    @property
    def where(self) -> str:
        return "the Hugging Face Hub" if self.hub == DEFAULT_HUB else self.hub


def explain(ref: HubRef, file: str, status: int, reason: str = "") -> HubError:
    """A failed request in words: gated (401/403), missing (404), unreachable (0), or the HTTP status."""
    at = f"{ref.repo} at revision {ref.revision}"
    if status in (401, 403):
        return HubError(f"{ref.repo} is gated or private on {ref.where} (HTTP {status} for {file}): its owners "
                        "ask visitors to sign in or accept a licence, and this page asks for no tokens. Download the "
                        "files where you have access and drop them on the page.", status)
    if status == 404:
        return HubError(f"{file} is not in {at} on {ref.where} (HTTP 404): check the model's name and the "
                        "revision.", status)
    if status == 0:
        return HubError(f"{ref.where} could not be reached for {file} ({reason or 'network error'}): offline, or "
                        "a mirror that does not allow this page's requests (CORS).", status)
    return HubError(f"{file} of {at}: the server answered HTTP {status}{f' ({reason})' if reason else ''}.", status)


def progress_text(file: str, done: int, total: int | None, seconds: float, cached: bool = False) -> str:
    """'model.safetensors: 120 of 548 MB · 35.2 MB/s · 12 s left' (what the status line shows while it comes)."""
    if cached:
        return f"{file}: {done / 1e6:,.0f} MB from this browser's cache"
    rate = done / seconds if seconds > 0 else 0.0
    text = f"{file}: {done / 1e6:,.0f}" + (f" of {total / 1e6:,.0f} MB" if total else " MB")
    if rate > 0:
        text += f" · {rate / 1e6:,.1f} MB/s"
        if total and total > done:
            text += f" · {(total - done) / rate:,.0f} s left"
    return text


Progress = Callable[[str, int, "int | None", float, bool], None]


async def fetch_model(ref: HubRef, fetcher: Any, progress: Progress,
                      room: Callable[[str, int], None] | None = None) -> dict[str, bytearray]:
    """The model's files {name: bytes}: config.json, the tokenizer (tokenizer.json, else vocab.json + merges.txt)
    and the safetensors weights (model.safetensors, else its index and shards), or the named .gguf alone.
    `room(file, size)` is called once a weights file's size is known, before its bytes are read: it raises (NoRoom)
    to refuse, which cancels the download. HubError names what is missing; Cancelled after Cancel."""

    async def get(file: str, weights: bool = False) -> bytearray:
        started = time.monotonic()
        refusal: list[BaseException] = []

        asked: list[bool] = []

        def report(done: int, total: int | None, cached: bool = False) -> None:
            if weights and room is not None and total and not asked:
                asked.append(True)  # once per file: its size is known before its bytes (or from the cache)
                try:
                    room(file, total)
                except MemoryError as exc:
                    refusal.append(exc)
                    fetcher.cancel()
                    return
            if not refusal:
                progress(file, done, total, time.monotonic() - started, cached)

        try:
            data = await fetcher.fetch(ref.url(file), report)
        except FetchFailed as exc:
            if refusal:
                raise refusal[0] from None
            if exc.cancelled:
                raise Cancelled() from None
            raise explain(ref, file, exc.status, exc.reason) from None
        if refusal:  # the whole file came before the refusal could stop it
            raise refusal[0]
        return data

    async def first_of(options: tuple[tuple[str, ...], ...], what: str) -> dict[str, bytearray]:
        for names in options:
            try:
                return {name: await get(name) for name in names}
            except HubError as exc:
                if exc.status != 404:
                    raise
        raise HubError(f"{ref.repo} at revision {ref.revision} on {ref.where} has no {what}.")

    if ref.file:
        return {ref.file.rsplit("/", 1)[-1]: await get(ref.file, weights=True)}
    files = {"config.json": await get("config.json")}
    files.update(await first_of(TOKENIZERS, "tokenizer.json (nor vocab.json and merges.txt)"))
    try:
        files["model.safetensors"] = await get("model.safetensors", weights=True)
    except HubError as exc:
        if exc.status != 404:
            raise
        try:
            index = await get("model.safetensors.index.json")
        except HubError as exc:
            if exc.status != 404:
                raise
            raise HubError(f"{ref.repo} at revision {ref.revision} has no safetensors weights (model.safetensors "
                           "or its index): this page reads safetensors or GGUF, never PyTorch's pickles "
                           "(pytorch_model.bin).") from None
        import json

        files["model.safetensors.index.json"] = index
        for shard in sorted(set(json.loads(bytes(index)).get("weight_map", {}).values())):
            files[shard] = await get(shard, weights=True)
    return files


class FetchFailed(Exception):
    """A fetcher's failure: the HTTP status (0: no answer), the reason, and whether Cancel caused it."""

    def __init__(self, status: int, reason: str = "", cancelled: bool = False) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status, self.reason, self.cancelled = status, reason, cancelled


class BrowserFetcher:
    """The worker's slmHub: each file from Cache Storage, else downloaded (and kept there), with progress."""

    def __init__(self, js_hub: Any) -> None:
        self.js = js_hub
        self.job: Any = None
        self.cached = True  # every file came from the cache
        self.not_kept = ""  # why a downloaded file could not be kept in the cache, if one could not

    async def fetch(self, url: str, report: Callable[..., None]) -> bytearray:
        from pyodide.ffi import create_proxy  # only in the browser

        self.cancelled = False
        callback = create_proxy(lambda done, total, cached=False: report(int(done), None if total is None
                                                                          else int(total), bool(cached)))
        self.job = self.js.download(url, callback)
        try:
            result = await self.job.done
        finally:
            self.job = None
            callback.destroy()
        if self.cancelled:  # a file from the cache comes whole at once: not copied in when refused
            raise FetchFailed(0, "cancelled", cancelled=True)
        if int(result.status) != 200:
            # The answer's fields are those its case sets (hub.js): a missing one reads as its default.
            raise FetchFailed(int(result.status), str(getattr(result, "reason", "") or ""),
                              bool(getattr(result, "cancelled", False)))
        self.cached = self.cached and bool(getattr(result, "cached", False))
        self.not_kept = self.not_kept or str(getattr(result, "notKept", None) or "")
        data = result.bytes
        out = bytearray(data.byteLength)  # the one copy in the wasm heap: a float32 model's weights stay in it
        data.assign_to(out)
        return out

    def cancel(self) -> None:
        self.cancelled = True
        if self.job is not None:
            self.job.cancel()


class UrlFetcher:
    """CPython (`panel serve`, tests): urllib, following redirects, in a thread; nothing is cached."""

    def __init__(self) -> None:
        self.cancelled = False
        self.cached = False
        self.not_kept = "this Python keeps no cache"

    async def fetch(self, url: str, report: Callable[..., None]) -> bytearray:
        loop = asyncio.get_running_loop()

        def on_thread(done: int, total: int | None) -> None:
            loop.call_soon_threadsafe(report, done, total)

        return await asyncio.to_thread(self._get, url, on_thread)

    def _get(self, url: str, report: Callable[[int, int | None], None]) -> bytearray:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(urllib.request.Request(url), timeout=60) as resp:  # noqa: S310 - http(s) only
                total = int(resp.headers.get("Content-Length") or 0) or None
                report(0, total)
                out = bytearray()
                while chunk := resp.read(1 << 20):
                    if self.cancelled:
                        raise FetchFailed(0, "cancelled", cancelled=True)
                    out += chunk
                    report(len(out), total)
                return out
        except urllib.error.HTTPError as exc:
            raise FetchFailed(exc.code, str(exc.reason)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise FetchFailed(0, str(getattr(exc, "reason", exc))) from None

    def cancel(self) -> None:
        self.cancelled = True


def fetcher() -> BrowserFetcher | UrlFetcher:
    """The worker's slmHub in the browser, else urllib."""
    try:
        import js  # Pyodide's view of the worker's globals

        return BrowserFetcher(js.slmHub)
    except (ImportError, AttributeError):
        return UrlFetcher()
