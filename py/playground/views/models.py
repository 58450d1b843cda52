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

ACCEPT = ".npz,.zip,.json,.safetensors,.txt,.model,.gguf"
FORMATS = (
    "It reads: an <b>.npz</b> written by the Train view, <code>python -m slm.train</code> or "
    "<code>python -m slm.convert</code> (a nanoGPT checkpoint); a Hugging Face <b>GPT-2</b> or <b>Llama</b> "
    "checkpoint: <code>config.json</code>, <code>model.safetensors</code> and <code>tokenizer.json</code> (GPT-2 "
    "also with <code>vocab.json</code> + <code>merges.txt</code>), as several files or one <b>.zip</b>; a "
    "<b>.gguf</b> file (llama.cpp, ollama: GPT-2, Llama, GPT-NeoX; quantized weights are expanded). Up to "
    f"about {library.MAX_PARAMS // 1_000_000}M parameters and {library.MAX_BYTES / 1e9:.0f} GB of files. Choose the "
    "files here, or drop them (or their folder) anywhere on the page.")
HUB_NOTE = (
    "Or open a model on the Hugging Face Hub by its name (e.g. <code>openai-community/gpt2</code>; a revision is a "
    "branch, tag or commit, e.g. Pythia's <code>step3000</code>). Its safetensors weights, <code>config.json</code> "
    "and tokenizer are downloaded once and kept in this browser's cache. Gated models (a licence to accept, a "
    "sign-in) cannot be opened here: this page asks for no tokens.")


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
        self.hub_repo = pn.widgets.TextInput(label="Hugging Face model (owner/name)",
                                             placeholder="openai-community/gpt2", min_width=220, max_width=360,
                                             max_length=200, margin=(4, 10))
        self.hub_revision = pn.widgets.TextInput(label="Revision", value="main", width=140, max_length=200,
                                                 margin=(4, 10))
        self.hub_open = pn.widgets.Button(label="Open from the Hub", color="primary", width=170, align="end",
                                          margin=(4, 10), css_classes=["pg-press", "pg-hub-open"])
        self.hub_cancel = pn.widgets.Button(label="Cancel", color="warning", variant="outline", width=100,
                                            align="end", margin=(4, 10), visible=False,
                                            css_classes=["pg-press", "pg-hub-cancel"])
        self.hub_open.on_click(self._on_hub_open)
        self.hub_repo.param.watch(self._on_hub_open, "enter_pressed")
        self.hub_cancel.on_click(lambda _: self.shelf.cancel())
        self.hub_progress = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.table = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.download = pn.widgets.FileDownload(callback=self._npz, filename="model.npz",
                                                label="Download the model shown (.npz)", variant="outline",
                                                color="primary", width=280, margin=(4, 10), css_classes=["pg-press"])
        self.remove = pn.widgets.Button(label="Remove the model shown from this page", color="warning",
                                        variant="outline", width=300, margin=(4, 10), css_classes=["pg-press"])
        self.remove.on_click(self._on_remove)
        pn.bind(self.when_shown(self.update), state.param.model_name, state.param.models_changed, watch=True)
        self.shelf.param.watch(self._on_shelf, ["status", "stored", "storage", "busy", "downloading", "progress"])
        self.update()
        self._on_shelf()
        self.panel = pn.Column(
            title("Your models"),
            caption(FORMATS),
            self.picker,
            caption(HUB_NOTE),
            wrap_row(self.hub_repo, self.hub_revision, self.hub_open, self.hub_cancel),
            self.hub_progress, self.status,
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

    async def _on_hub_open(self, *_: object) -> None:
        if self.hub_repo.value_input or self.hub_repo.value:
            await self.shelf.open_hub(self.hub_repo.value_input or self.hub_repo.value,
                                      self.hub_revision.value_input or self.hub_revision.value)

    def _on_shelf(self, *_: object) -> None:
        shelf = self.shelf
        self.status.object = f"<div role='status' class='pg-summary pg-models-status'>{esc(shelf.status)}</div>"
        # A live region of its own, off: a screen reader would read every repaint of the numbers.
        self.hub_progress.object = (f"<div class='pg-summary pg-hub-progress' aria-live='off'>{esc(shelf.progress)}"
                                    "</div>" if shelf.progress else "")
        self.picker.disabled = self.hub_open.disabled = shelf.busy
        self.hub_cancel.visible = shelf.downloading
        if shelf.progress or shelf.downloading:
            return  # the table does not change while files come in
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
            elif name.startswith("hub: "):
                where = "from the Hub (files in this browser's cache)"
            else:
                where = "kept in this browser" if name in stored else "this page only"
            cfg = (model or _peek(name, state)).cfg
            rows.append([name, f"{cfg.n_layers} × {cfg.n_heads}, d = {cfg.n_model}, vocabulary {cfg.n_vocab}",
                         f"{slm.count_params(cfg) / 1e6:.2f}M", where, "shown" if name == state.model_name else ""])
        # In its own scrolling box: a long model name would otherwise widen a phone's page.
        self.table.object = ("<div class='pg-scroll' tabindex='0' role='region' aria-label='The models in this page'>"
                             + table_rows_html(["model", "layers × heads", "parameters", "where", ""], rows)
                             + "</div>")
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
