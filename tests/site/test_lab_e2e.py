"""The training lab and own models end to end, with a real wasm NumPy (PYODIDE_PACKAGES), in every engine: the three
tasks train from a link; the trained model joins the selector and survives a reload (IndexedDB); a GPT-2 checkpoint
made here by `transformers` is dropped on the page and a Llama one goes through the file picker; every view draws
on each and Generate streams.
Screenshots: artifacts/site/<engine>-lab-*.png.
"""

from __future__ import annotations

import base64
import time
import urllib.parse
from pathlib import Path

import pytest

from testkit.engines import ENGINES, FIND_JS, Engines, Page
from testkit.hosts import hosted

STATUS_JS = """() => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.matches(".pg-summary[role=status]") && el.textContent.trim()) out.push(el.textContent.trim());
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return out.join(" | ");
}"""
# The model selector: its value and its options' texts.
MODELS_JS = """() => {
  let found = null;
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.tagName === "SELECT" && [...el.options].some((o) => o.textContent === "lesson model")) found = el;
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return found && {value: found.value, options: [...found.options].map((o) => o.textContent)};
}"""
# Files dropped on the page, as a learner drops them from a file manager (a DataTransfer of File objects).
DROP_JS = """(files, picker) => {
  const transfer = new DataTransfer();
  for (const [name, data] of files) {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    transfer.items.add(new File([bytes], name));
  }
  if (picker) {
    // "Load a model…": the Your models view's file input, given the files as a learner's file dialog would
    let input = null;
    const walk = (root) => {
      for (const el of root.querySelectorAll("*")) {
        if (el.matches("input[type=file][accept*=npz]")) input = el;
        if (el.shadowRoot) walk(el.shadowRoot);
      }
    };
    walk(document);
    input.files = transfer.files;
    input.dispatchEvent(new Event("change", {bubbles: true}));
    return input.files.length;
  }
  for (const type of ["dragenter", "dragover", "drop"]) {
    document.body.dispatchEvent(new DragEvent(type, {dataTransfer: transfer, bubbles: true, cancelable: true}));
  }
  return transfer.files.length;
}"""
# Each attention heatmap of the newest document: the tokens its rows are labelled with.
HEATMAPS_JS = """() => [...Bokeh.documents.at(-1).all_models]
  .filter((m) => Array.isArray(m.renderers) && m.renderers.some((r) => r.name === "cells"))
  .map((fig) => {
    const data = fig.renderers.find((r) => r.name === "cells").data_source.data;
    return [...new Set(Array.from(data instanceof Map ? data.get("query_token") : data.query_token))];
  })"""
TOKENS_JS = """() => {
  let n = 0;
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.classList.contains("pg-tok")) n++;
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return n;
}"""


def status(page: Page) -> str:
    return page.evaluate(STATUS_JS)


def train(page: Page, url: str, query: str, steps: int) -> str:
    page.open(url + f"index.html?view=train&{query}&train_steps={steps}")
    assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
    try:
        return page.wait_js(f"() => {{ const s = ({STATUS_JS})(); return s.includes('step {steps} / {steps}') && "
                            f"s.includes('done') && s; }}", timeout_s=240)
    except AssertionError:
        page.screenshot(f"lab-{query.split('&')[0]}-stuck")
        raise AssertionError(f"{page.engine}: the run did not end: {status(page)!r}; {page.text('#error')!r}") from None


def gpt2_checkpoint(tmp_path: Path) -> list[list[str]]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from testkit.trained_tokenizers import gpt2_style

    torch.manual_seed(0)
    tokenizer = gpt2_style(vocab_size=300)
    cfg = transformers.GPT2Config(vocab_size=tokenizer.get_vocab_size(), n_embd=32, n_layer=2, n_head=4,
                                  n_positions=64, bos_token_id=0, eos_token_id=0)
    folder = tmp_path / "tiny-gpt2"
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return [[p.name, base64.b64encode(p.read_bytes()).decode()] for p in sorted(folder.iterdir()) if p.is_file()]


def llama_checkpoint(tmp_path: Path) -> list[list[str]]:
    """A Llama with grouped-query attention whose embedding has more rows than its tokenizer has tokens (as padded
    checkpoints do), its tokenizer a byte-fallback BPE."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from testkit.trained_tokenizers import llama_style

    torch.manual_seed(1)
    tokenizer = llama_style(legacy=True, vocab_size=400)
    cfg = transformers.LlamaConfig(vocab_size=tokenizer.get_vocab_size() + 7, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    folder = tmp_path / "tiny-llama"
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return [[p.name, base64.b64encode(p.read_bytes()).decode()] for p in sorted(folder.iterdir()) if p.is_file()]


def load_checkpoint(page: Page, files: list[list[str]], picker: bool, loaded_js: str, what: str) -> None:
    """Files given to the page, dropped or through "Load a model…" (the picker), until the model selector's value
    passes `loaded_js` (a test appended to it)."""
    if picker:
        page.click("label", "Your models")
        page.wait_js(f"() => !!({FIND_JS})('input[type=file][accept*=npz]')", timeout_s=60)
    assert page.evaluate(DROP_JS, files, picker) == len(files)
    try:
        page.wait_js(f"() => ({MODELS_JS})()?.value{loaded_js}", timeout_s=120)
    except AssertionError:
        page.screenshot(f"lab-{what}-stuck")
        raise AssertionError(f"{page.engine}: the {what} checkpoint did not load: {status(page)!r}") from None


def every_view_then_generate(page: Page, shot: str) -> None:
    """Each view shown on the loaded model (the worker answers each), then Generate streams."""
    for label in ("Attention", "Residual stream", "Next token", "Heads", "Patching", "Model map"):
        page.click("label", label)
        page.wait_js("document.body.dataset.worker !== 'busy'", timeout_s=60)
    page.screenshot(f"{shot}-map")
    assert page.evaluate(TOKENS_JS) == 0  # a new model clears the last model's continuation
    page.click("button", "Generate")
    page.wait_js(f"() => ({TOKENS_JS})() >= 3", timeout_s=60)
    page.screenshot(f"{shot}-generated")


@pytest.mark.parametrize("engine", ENGINES)
def test_three_tasks_train_the_model_is_kept_and_a_dropped_checkpoint_runs(engines: Engines, engine: str,
                                                                           vendored_site: Path, tmp_path: Path) -> None:
    files, llama = gpt2_checkpoint(tmp_path), llama_checkpoint(tmp_path)
    with hosted(vendored_site, "plain") as url, engines.page(engine) as page:
        for task, steps in (("grammar", 20), ("text", 20), ("repeat", 40)):
            if task == "text":
                # No text yet: a link that starts the text task says what is missing, and trains once it is given.
                page.open(url + f"index.html?view=train&task=text&autostart=1&train_steps={steps}")
                page.wait_js(f"() => ({STATUS_JS})().includes('Not started')", timeout_s=60)
                page.fill("textarea", "the quick brown fox jumps over the lazy dog. " * 40)
                page.click("button", "Start")
                line = page.wait_js(f"() => {{ const s = ({STATUS_JS})(); return s.includes('· done') && s; }}",
                                    timeout_s=240)
            elif task == "grammar":
                # stall=20: the start-up watchdog times the start only; after 'ready', a pause in the worker's
                # messages (the run has ended) must not end on the "Stalled" panel
                line = train(page, url, f"task={task}&autostart=1&stall=20", steps)
                time.sleep(25)
                assert page.evaluate("document.body.dataset.error") is None, page.text("#error")
            else:
                line = train(page, url, f"task={task}&autostart=1", steps)
            print(f"[{engine}] {task}: {line}")
            page.screenshot(f"lab-{task}-done")
        # the repeat run becomes the model of every view, and a reload keeps it (the button is enabled once the
        # run's last chunk has been drawn)
        page.wait_js(f"() => !({FIND_JS})('button', 'Explore this model').disabled", timeout_s=120)
        page.click("button", "Explore this model")
        page.wait_js(f"() => ({MODELS_JS})()?.value?.startsWith('trained: repeat')", timeout_s=60)
        page.wait_js(f"() => ({STATUS_JS})().includes('a reload keeps it')", timeout_s=60)
        page.screenshot("lab-explore-map")
        page.reload()
        page.wait_ready()
        page.wait_js(f"() => ({MODELS_JS})()?.options.some((o) => o.startsWith('trained: repeat'))", timeout_s=60)
        # a checkpoint dropped on the page: loaded, shown, every view draws, Generate streams
        # WebKit gives a synthetic drop no files (a real one has them): there the files go through the picker
        load_checkpoint(page, files, engine == "webkit", "?.startsWith('loaded: ')", "gpt2")
        every_view_then_generate(page, "lab-loaded")
        # a Llama through "Load a model…" (the file picker), in every engine; loose files are named by their shape
        load_checkpoint(page, llama, True, " === 'loaded: llama 2x4 d32'", "llama")
        every_view_then_generate(page, "lab-llama")
        assert "Generation stopped" not in status(page)
        assert page.evaluate("document.body.dataset.error") is None, page.text("#error")
        assert page.errors() == [], page.errors()


def test_a_single_file_saved_with_a_trained_model_opens_on_it(browser: object, vendored_site: Path,
                                                               tmp_path: Path) -> None:
    """Train, Explore (kept in the store), "Save for offline use": the file, opened from disk with ?model=, shows
    that model, says it has no storage, and its views run."""
    from conftest import Visit, serve

    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open("index.html?view=train&task=repeat&autostart=1&train_steps=20")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        visit.page.locator(".pg-summary[role=status]", has_text="· done").wait_for(timeout=240_000)
        explore = visit.page.get_by_role("button", name="Explore this model")
        visit.page.wait_for_function("(b) => !b.disabled", arg=explore.element_handle(), timeout=120_000)
        explore.click()
        # the first of the two panes that say it (the Train view's, the Your models view's)
        kept = visit.page.locator(".pg-summary[role=status]", has_text="a reload keeps it").first
        try:
            kept.wait_for(state="attached", timeout=60_000)  # the hidden view's pane may come first
        except Exception:  # noqa: BLE001 - say what the page said instead
            raise AssertionError(visit.page.locator(".pg-summary[role=status]").all_inner_texts()) from None
        name = visit.page.get_by_label("Model", exact=True).input_value()
        assert name.startswith("trained: repeat"), name
        with visit.page.expect_download(timeout=180_000) as download:
            visit.page.get_by_role("button", name="Save for offline use").click()
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
    query = urllib.parse.urlencode({"model": name, "view": "models"})
    with Visit(browser, saved.as_uri(), allowed=("file:", "blob:", "data:")) as visit:
        visit.open(f"?{query}")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        select = visit.page.get_by_label("Model", exact=True)
        deadline = time.monotonic() + 60
        while select.input_value() != name and time.monotonic() < deadline:
            time.sleep(0.2)
        options = select.locator("option").all_inner_texts()
        statuses = visit.page.locator(".pg-summary[role=status]").all_inner_texts()
        assert select.input_value() == name, (options, statuses, visit.page.evaluate("location.search"))
        visit.page.get_by_text("This page has no storage", exact=False).first.wait_for(timeout=30_000)
        visit.page.screenshot(path=str(Path(__file__).resolve().parents[2] / "artifacts" / "site" /
                                       "chromium-lab-portable-model.png"), full_page=True)


def test_a_single_file_saved_with_a_loaded_checkpoint_opens_on_it(browser: object, vendored_site: Path,
                                                                  tmp_path: Path) -> None:
    """A Llama checkpoint made here by `transformers`, dropped on the page (kept in the store), then "Save for
    offline use": the file, opened from disk with ?model=, shows that model, says it has no storage, and Generate
    streams from it."""
    from conftest import Visit, serve

    llama = llama_checkpoint(tmp_path)
    name = "loaded: llama 2x4 d32"
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        assert visit.page.evaluate(f"([files, picker]) => ({DROP_JS})(files, picker)", [llama, False]) == len(llama)
        visit.wait_js(f"({MODELS_JS})()?.value === {name!r}", timeout_s=120)
        visit.wait_js(f"({STATUS_JS})().includes('a reload keeps it')", timeout_s=60)
        with visit.page.expect_download(timeout=180_000) as download:
            visit.page.get_by_role("button", name="Save for offline use").click()
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
    query = urllib.parse.urlencode({"view": "attention", "model": name})
    with Visit(browser, saved.as_uri(), allowed=("file:", "blob:", "data:")) as visit:
        visit.open(f"?{query}")
        # At the moment the page says it is ready: the selector names the linked model, and the open view draws at
        # least its 2 x 4 heads and the enlarged one (views built after 'ready' may add theirs), every heatmap on
        # the same tokens, which begin with this tokenizer's <s> (the built-in models' would begin with <start>).
        from testkit.trained_tokenizers import llama_style

        bos = llama_style(legacy=True, vocab_size=400).id_to_token(1)
        ready = visit.page.evaluate(f"() => [document.body.dataset.ready, ({MODELS_JS})()?.value, ({HEATMAPS_JS})()]")
        assert ready[:2] == ["1", name], (ready, visit.console)
        assert len(ready[2]) >= 2 * 4 + 1 and all(tokens == ready[2][0] for tokens in ready[2]), ready
        assert ready[2][0][0] == bos and "<start>" not in ready[2][0], ready[2][0]
        # said in the Your models view, hidden: the page opens on the map of this model
        visit.page.get_by_text("This page has no storage", exact=False).first.wait_for(state="attached",
                                                                                        timeout=30_000)
        visit.page.get_by_role("button", name="Generate").click()
        visit.wait_js(f"({TOKENS_JS})() >= 3", timeout_s=60)
        visit.page.screenshot(path=str(Path(__file__).resolve().parents[2] / "artifacts" / "site" /
                                       "chromium-lab-portable-llama.png"), full_page=True)
        assert visit.external == []
        assert not [c for c in visit.console if "pageerror" in c], visit.console
