"""Your models: load a checkpoint or an .npz, see what the page keeps, download the model shown.

Files come from the picker here or from a drop anywhere on the page (playground.inbox); the Shelf
(playground.library) does the loading and the keeping, this view shows it.
"""

from __future__ import annotations

import asyncio
import io

import panel as pn

import slm

from .. import library
from ..state import PlaygroundState
from .common import View, caption, esc, table_rows_html, title, wrap_row

ACCEPT = ".npz,.zip,.json,.safetensors,.txt,.model"
FORMATS = (
    "It reads: an <b>.npz</b> written by the Train view, <code>python -m slm.train</code> or "
    "<code>python -m slm.convert</code> (a nanoGPT checkpoint); a Hugging Face <b>GPT-2</b> or <b>Llama</b> "
    "checkpoint: <code>config.json</code>, <code>model.safetensors</code> and <code>tokenizer.json</code> (GPT-2 "
    "also with <code>vocab.json</code> + <code>merges.txt</code>), as several files or one <b>.zip</b>. Up to "
    f"about {library.MAX_PARAMS // 1_000_000}M parameters. Choose the files here, or drop them (or their folder) "
    "anywhere on the page.")


class ModelsView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.shelf: library.Shelf = state.shelf
        self.picker = pn.widgets.FileInput(label="Load a model…", multiple=True, accept=ACCEPT,
                                           sizing_mode="stretch_width", max_width=520, margin=(4, 10),
                                           css_classes=["pg-file"], description=None)
        self.picker.param.watch(self._on_pick, ["value", "filename"])
        self._picking = False
        self.status = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.table = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.download = pn.widgets.FileDownload(callback=self._npz, filename="model.npz",
                                                label="Download the model shown (.npz)", variant="outline",
                                                color="primary", width=280, margin=(4, 10), css_classes=["pg-press"])
        self.remove = pn.widgets.Button(label="Remove the model shown from this page", color="warning",
                                        variant="outline", width=300, margin=(4, 10), css_classes=["pg-press"])
        self.remove.on_click(self._on_remove)
        pn.bind(self.when_shown(self.update), state.param.model_name, state.param.models_changed, watch=True)
        self.shelf.param.watch(self._on_shelf, ["status", "stored", "storage", "busy"])
        self.update()
        self._on_shelf()
        self.panel = pn.Column(
            title("Your models"),
            caption(FORMATS),
            self.picker, self.status,
            title("In this page", level=3), self.table, self.note,
            wrap_row(self.download, self.remove),
            name="Your models", sizing_mode="stretch_width",
        )

    async def _on_pick(self, *events: object) -> None:
        # Under `panel serve`: the built site hands picked files to playground.inbox as bytes (site/src/page/drop.js)
        # and this value stays empty. A pick changes value, filename and mime_type one after another (each change
        # calls this): the files are read once, on the next turn of the loop, when all three have arrived.
        if self._picking:
            return
        self._picking = True
        try:
            await asyncio.sleep(0)
        finally:
            self._picking = False
        values, names = self.picker.value, self.picker.filename
        if not values:
            return
        if not isinstance(values, list):
            values, names = [values], [names]
        if not isinstance(names, list) or len(names) != len(values):
            return  # the names are still on their way: their own change reads the pick
        await self.shelf.receive(dict(zip(names, values, strict=True)))

    def _on_shelf(self, *_: object) -> None:
        shelf = self.shelf
        self.status.object = f"<div role='status' class='pg-summary'>{esc(shelf.status)}</div>"
        self.picker.disabled = shelf.busy
        self.update()

    async def _on_remove(self, _event: object) -> None:
        if self.state.model_name not in ("shipped", "lesson"):
            await self.shelf.remove(self.state.model_name)

    def _npz(self) -> io.BytesIO:
        return io.BytesIO(library.model_bytes(self.state.model))

    def update(self, *_: object) -> None:
        state, shelf = self.state, self.shelf
        stored = {item.get("key") for item in shelf.stored}
        rows = []
        for name in state.param.model_name.objects:
            model = state.model if name == state.model_name else None
            if name in ("shipped", "lesson"):
                where = "built in"
            else:
                where = "kept in this browser" if name in stored else "this page only"
            cfg = (model or _peek(name, state)).cfg
            rows.append([name, f"{cfg.n_layers} × {cfg.n_heads}, d = {cfg.n_model}, vocabulary {cfg.n_vocab}",
                         f"{slm.count_params(cfg) / 1e6:.2f}M", where, "shown" if name == state.model_name else ""])
        self.table.object = table_rows_html(["model", "layers × heads", "parameters", "where", ""], rows)
        own = state.model_name not in ("shipped", "lesson")
        notes = []
        if own:
            notes.append("A link to this page cannot carry these weights: it opens on this model only in a browser "
                         "that keeps it (or in a single-file copy saved with it).")
        if not shelf.storage:
            notes.append("This page has no storage (a single-file copy or a sandboxed frame): trained and loaded "
                         "models last until it closes. Download them to keep them.")
        self.note.object = "".join(f"<p class='pg-summary'>{esc(n)}</p>" for n in notes)
        self.remove.visible = own
        self.download.filename = _filename(state.model_name)


def _peek(name: str, state: PlaygroundState) -> slm.Model:
    from ..models import load_model

    return load_model(name, **state.architecture)


def _filename(name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.replace(": ", "-")).strip("-")
    return f"{safe or 'model'}.npz"
