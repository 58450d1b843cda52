"""Models a learner brings, as the page takes them: files read by `slm.load` (which decides their kind and checks
their weights) within what the page can hold, the reason in words when they are not a model, and the page's storage.

No Panel here: the models view calls these, and the tests call them directly.
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import param

import slm
from slm.params import MAX_PARAMS

from . import hub, inbox, memory, storage
from .models import REGISTRY, model_names

MAX_BYTES = 1_000_000_000  # the files of a 200M-parameter model in float32 (800 MB), its tokenizer, a margin


class LoadError(ValueError):
    """Files that are not a model the page can show: the message names the file and the reason."""


def describe(files: dict[str, bytes]) -> str:
    names = sorted(files)
    if len(names) == 1:
        return names[0]
    return f"{len(names)} files ({', '.join(names[:4])}{', …' if len(names) > 4 else ''})"


def load_files(files: dict[str, bytes], in_place: bool = False, held: tuple[slm.Model, ...] = ()) -> slm.Model:
    """The model in `files` ({name: bytes}: one .npz, one .zip, or a checkpoint's files), read by slm.load;
    LoadError otherwise, or memory.NoRoom when the page cannot get the memory the weights need (asked for before
    any is read whole; `held`: the models loaded, counted by CPython's limit). `in_place=True` hands bytearrays
    over to the model (slm.load's in_place): its weights may stay in them."""
    if not files:
        raise LoadError("No files were given.")
    what = describe(files)
    total = sum(len(data) for data in files.values())
    if total > MAX_BYTES:
        raise LoadError(f"{what}: {total / 1e6:.0f} MB is more than this page can hold ({MAX_BYTES / 1e6:.0f} MB, "
                        f"about {MAX_PARAMS // 1_000_000}M parameters in float32).")
    memory.make_room(memory.load_needs(files), what, held)
    try:
        model = slm.load(files, in_place=in_place)
    except (ValueError, KeyError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise LoadError(f"{what}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - e.g. a truncated zip (BadZipFile): any file must get a message
        raise LoadError(f"{what}: not a model file ({type(exc).__name__}: {exc})") from None
    count = slm.count_params(model.cfg)
    if count > MAX_PARAMS:
        raise LoadError(f"{what}: {count / 1e6:.1f}M parameters is more than this page can run "
                        f"({MAX_PARAMS // 1_000_000}M).")
    if model.tokenizer is None:
        raise LoadError(f"{what}: the model has no tokenizer, so the page cannot turn a prompt into its tokens.")
    return model


def model_bytes(model: slm.Model) -> bytes:
    """The model as its .npz file (docs/slm.md), to download."""
    out = io.BytesIO()
    model.save(out)
    return out.getvalue()


class Shelf(param.Parameterized):
    """The page's trained and loaded models: loading files, opening models from the Hub, keeping models in the
    page's storage, restoring them after a reload. One per playground; its `status` is what the models view
    announces.

    Memory: one large model (memory.LARGE) is held at a time. The wasm heap never shrinks, so a second one replaces
    the first (which stays in the browser's storage or cache), and one that does not fit beside the model shown is
    refused with the size it needs while the model shown stays loaded."""

    status = param.String(default="", doc="The last load or save, in words (announced)")
    busy = param.Boolean(default=False)
    downloading = param.Boolean(default=False, doc="Files are coming from the Hub (Cancel stops them)")
    progress = param.String(default="", doc="The Hub download's MB, MB/s and time left")
    storage = param.Boolean(default=True, doc="The page can keep models across reloads (IndexedDB)")
    stored = param.List(default=[], doc="What the storage holds: dicts with key, name, bytes")
    hub_base = param.String(default=hub.DEFAULT_HUB, doc="The Hub or mirror the box opens models from (hub=)")

    def __init__(self, state: Any, **params: Any) -> None:
        super().__init__(**params)
        self.state = state
        self.receiver = inbox.subscribe(inbox.Receiver(self.receive, self.refused))
        self._fetcher: Any = None
        self._shown_at = 0.0

    def held(self) -> tuple[slm.Model, ...]:
        """The models this page holds in memory (CPython's memory limit counts them)."""
        return (*REGISTRY.values(), self.state.model)

    def refused(self, message: str) -> None:
        """Files the page could not take in at all (no memory for them)."""
        self.status = f"Not loaded: {message} The model shown before is still loaded."

    async def receive(self, files: dict[str, bytes]) -> None:
        """Files from the picker or a drop: load, add to the selector and show, keep in storage."""
        self.param.update(busy=True, status=f"Reading {describe(files)}…")
        await asyncio.sleep(0)  # let the page show the status before the (seconds long) parse
        try:
            model = self._load(files)
        except (LoadError, MemoryError) as exc:
            self.param.update(busy=False, status=f"Not loaded: {exc} The model shown before is still loaded.")
            return
        # What the model does not keep of the files' bytes (a tokenizer's, a half-precision file's) can go before
        # keep() writes the model out (the wasm heap never shrinks, so the peak is what the page keeps).
        files.clear()
        name = self.state.add_model(model, "loaded")
        dropped = self._one_large(name)
        self.busy = False
        await self.keep(name, model, f"{name} ({slm.count_params(model.cfg) / 1e6:.2f}M parameters) is now the model "
                        f"of every view.{dropped}")

    def _load(self, files: dict[str, bytes]) -> slm.Model:
        """load_files; when the memory is not there, the large models not shown are let go and it is asked again."""
        try:
            return load_files(files, in_place=True, held=self.held())
        except memory.NoRoom:
            if not self._large_others(self.state.model_name):
                raise
        self._one_large(self.state.model_name, keep_shown_only=True)
        return load_files(files, in_place=True, held=self.held())

    def _large_others(self, name: str) -> list[str]:
        return [other for other, model in REGISTRY.items()
                if other != name and memory.in_use([model]) >= memory.LARGE]

    def _one_large(self, name: str, keep_shown_only: bool = False) -> str:
        """Lets go of the other large models in memory when `name` is large (or, `keep_shown_only`, whatever it
        is): they stay in the browser's storage or cache. A sentence saying which, or ""."""
        if not keep_shown_only and memory.in_use([REGISTRY[name]]) < memory.LARGE:
            return ""
        others = self._large_others(name)
        for other in others:
            self.state.forget_model(other)
        if not others:
            return ""
        return (f" {', '.join(others)} left memory to make room (one large model at a time); its files stay in "
                "this browser.")

    # ---- the Hub ----

    async def open_hub(self, repo: str, revision: str | None = None, hub_base: str | None = None,
                       file: str | None = None) -> None:
        """A model from the Hub (or the mirror at `hub_base`) by name: its files downloaded with progress (or read
        from this browser's cache), loaded and shown. The model shown before stays if anything goes wrong."""
        if self.downloading:
            return
        try:
            ref = hub.HubRef.parse(repo, revision, hub_base or self.hub_base, file)
        except ValueError as exc:
            self.status = f"Not opened: {exc}"
            return
        self._fetcher = fetcher = hub.fetcher()
        self.param.update(busy=True, downloading=True, progress="",
                          status=f"Opening {ref.label} from {ref.where}…")
        self._shown_at = 0.0
        try:
            files = await hub.fetch_model(ref, fetcher, self._on_progress, self._room(ref))
            self.progress = ""
            self.status = f"Reading {ref.label}…"
            await asyncio.sleep(0)
            model = self._load(files)
        except hub.Cancelled:
            self.param.update(busy=False, downloading=False, progress="",
                              status=f"Cancelled: {ref.label} was not opened. The model shown before is still loaded.")
            return
        except (hub.HubError, LoadError, MemoryError) as exc:
            self.param.update(busy=False, downloading=False, progress="",
                              status=f"Not opened: {exc} The model shown before is still loaded.")
            return
        finally:
            self._fetcher = None
        files.clear()
        model.meta["name"] = ref.label
        model.meta["hub"] = {"repo": ref.repo, "revision": ref.revision, "hub": ref.hub, "file": ref.file}
        name = self.state.add_model(model, "hub")
        dropped = self._one_large(name)
        if fetcher.cached:
            where = "from this browser's cache"
        elif fetcher.not_kept:
            where = f"from {ref.where} (its files were not kept: {fetcher.not_kept}; the next visit downloads them)"
        else:
            where = (f"from {ref.where}; its files are kept in this browser's cache, so the next visit opens it "
                     "from there")
        self.param.update(busy=False, downloading=False, progress="",
                          status=f"{name} ({slm.count_params(model.cfg) / 1e6:.2f}M parameters) is now the model of "
                          f"every view, opened {where}.{dropped}")

    def _room(self, ref: hub.HubRef) -> Any:
        def room(file: str, size: int) -> None:
            # The file comes into the heap whole, with a margin for the load: asked for before its first byte.
            try:
                memory.make_room(size + memory.MARGIN, f"{ref.label} ({file}, {memory.mb(size)})", self.held())
            except memory.NoRoom:
                if not self._large_others(self.state.model_name):
                    raise
                self._one_large(self.state.model_name, keep_shown_only=True)
                memory.make_room(size + memory.MARGIN, f"{ref.label} ({file}, {memory.mb(size)})", self.held())
        return room

    def _on_progress(self, file: str, done: int, total: int | None, seconds: float, cached: bool) -> None:
        # At most four repaints a second: each is a patch the page lays out.
        now = time.monotonic()
        if done and total and done < total and now - self._shown_at < 0.25:
            return
        self._shown_at = now
        self.progress = hub.progress_text(file, done, total, seconds, cached)

    def cancel(self) -> None:
        """Stops the Hub download under way (its files so far are not kept)."""
        if self._fetcher is not None:
            self._fetcher.cancel()

    async def keep(self, name: str, model: slm.Model, done: str) -> None:
        """Put a model in the page's storage (when it has one) and say what happened."""
        shop = storage.store()
        try:
            if not await shop.available():
                self.param.update(storage=False, status=f"{done} This page has no storage (a single-file copy or "
                                  "a sandboxed frame), so the model lasts until the page closes: download it to "
                                  "keep it.")
                return
            # Uncompressed: zlib in wasm takes seconds for tens of MB and holds the page's one Python thread.
            # Written in chunks straight to the store: no second copy of the weights in the wasm heap.
            await shop.put_written(name, lambda file: model.save(file, compress=False), name)
            self.param.update(stored=await shop.list(), status=f"{done} Kept in this browser's storage: a reload "
                              "keeps it.")
        except Exception as exc:  # noqa: BLE001 - quota, a private window: say so, the model stays loaded
            self.status = f"{done} It could not be kept in this browser's storage ({exc}): download it to keep it."

    async def restore(self, wanted: str | None = None) -> None:
        """After the page starts: the stored models back into the selector; `wanted` (the URL's model=) shown."""
        shop = storage.store()
        try:
            self.storage = bool(await shop.available())
            items = await shop.list()
        except Exception as exc:  # noqa: BLE001 - a broken database must not stop the page
            self.status = f"The models kept in this browser could not be read ({exc})."
            return
        self.stored = items
        failed, not_read = [], []
        for item in items:
            key = str(item.get("key"))
            if key in REGISTRY or key.startswith(storage.SAE_PREFIX):
                continue
            if int(item.get("bytes") or 0) >= memory.LARGE and key != wanted:
                not_read.append(key)  # one large model at a time: the link's, or none
                continue
            try:
                REGISTRY[key] = await read_kept(shop, key)
            except Exception:  # noqa: BLE001 - one damaged entry: name it, restore the others
                failed.append(key)
        self.state.param.model_name.objects = model_names()
        self.state.models_changed += 1
        if wanted and wanted in REGISTRY:
            self.state.model_name = wanted
        if failed:
            self.status = f"These kept models could not be read and were left out: {', '.join(failed)}."
        elif not_read:
            self.status = (f"Kept in this browser but not read into memory (one large model at a time): "
                           f"{', '.join(not_read)}. A link with model=NAME opens one.")

    async def remove(self, name: str) -> None:
        shop = storage.store()
        try:
            await shop.remove(name)
            await shop.remove(storage.SAE_PREFIX + name)
            self.stored = await shop.list()
        except Exception as exc:  # noqa: BLE001
            self.status = f"{name} could not be removed from this browser's storage ({exc})."
            return
        self.state.forget_model(name)
        self.status = f"Removed {name}."


async def read_kept(shop: Any, key: str) -> slm.Model:
    """A model from the page's storage, named as when it was kept."""
    model = slm.Model.load(await shop.get(key), in_place=True)  # the store's copy: its weights stay in it
    model.meta.setdefault("name", key.partition(": ")[2] or key)
    return model


async def restore_linked(key: str) -> None:
    """Before the app is built: the kept model a link names (model=), so that the first view drawn shows it. What
    goes wrong here (no storage, no such model, a damaged entry) is left for Shelf.restore to report after 'ready'."""
    if not key or key in model_names():
        return
    shop = storage.store()
    try:
        if any(str(item.get("key")) == key for item in await shop.list()):
            REGISTRY[key] = await read_kept(shop, key)
    except Exception:  # noqa: BLE001, S110 - reported by Shelf.restore, which reads the same entry again
        pass
