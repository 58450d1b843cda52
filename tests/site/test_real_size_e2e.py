"""A model of GPT-2 small's size (124M parameters: 12 layers × 12 heads, d 768, 50,257 embedding rows; random
weights, float32 safetensors of ~500 MB made here with `transformers`) opened by name from a local mirror with the
Hub's URL layout, end to end in Chromium, Firefox and WebKit (`PYODIDE_PACKAGES`): every view drawn for it, text
generated from it, and after a reload the model opened from the browser's cache without a request to the mirror.
In Chromium also: the same model where the page may not grow its memory that far is refused with the size it needs.
Screenshots: artifacts/site/<engine>-real-size-<view>.png (look at them)."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest

from conftest import serve
from testkit.engines import ARTIFACTS, CHROMIUM, FIND_JS, ChromiumPage, Engines, Page

pytest.importorskip("transformers")
from testkit.hub_mirror import Mirror, gpt2_checkpoint, serving  # noqa: E402

REPO = "school/gpt2-small-shape"
PROMPT = "the cat sat on the mat and the dog sat on the log"
# The Patching view's settings, in words this model's tokenizer has as single tokens (its own example's it lacks):
# position 2 ("␣") becomes "on", the metric logit("the") − logit("and").
PATCHING = {"patch_pos": "2", "patch_token": "on", "good": "the", "bad": "and"}
# Every view's text once drawn for this model: what only a drawing of a 12-layer, 12-head model with 50,257
# embedding rows shows, or (Block, Train, Features, Your models, Lessons) the view's own words for a model this size.
DRAWN = {
    "map": r"L11\.ffn",
    "generate": r"Analyse prompt \+ continuation",
    "attention": r"Every head at a glance[\s\S]*layer 11 · head 11",
    "residual": r"L11\.ffn",
    "next": r"most likely next token is “<unused \d+>”",
    "block": r"This view shows the lesson model",
    "heads": r"strongest head \(probe set\)[\s\S]*layer \d+ · head \d+",
    "patching": r"Running the patches|Patched run: ",
    "train": r"Train a transformer",
    "features": r"Start will take about \d+ min on this model",
    "models": r"hub: school/gpt2-small-shape",
    "lessons": r"Step-by-step lessons",
}
# The text on screen, through Bokeh's and Panel's shadow roots, with what a shown chart's closed "numbers" disclosure
# and a shown menu hold (a chart's axis labels are drawn, not text).
VISIBLE_TEXT_JS = """() => {
  const parts = [];
  const shown = (el) => el.getClientRects().length > 0 || (el.closest("details, select")?.getClientRects().length > 0);
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if (el.children.length === 0 && el.textContent.trim() && shown(el)) parts.push(el.textContent.trim());
    }
  };
  walk(document);
  return parts.join("\\n");
}"""
# The tokens shown (the prompt's and the generated ones).
COUNT_TOKENS_JS = """() => {
  let n = 0;
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.classList.contains("pg-tok") && el.getClientRects().length > 0) n++;
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return n;
}"""
# The Your models view's status line.
STATUS_JS = f"(({FIND_JS})('.pg-models-status') || {{}}).textContent || ''"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    files = gpt2_checkpoint(tmp_path_factory.mktemp("hub-124m"), n_layer=12, n_embd=768, n_head=12,
                            n_positions=1024, model_vocab=50257)
    assert len(files["model.safetensors"]) > 490e6  # GPT-2 small's float32 weights, tied embedding stored once
    with serving(Mirror({REPO: {"main": files}})) as running:
        yield running


class PersistentChromium(ChromiumPage):
    """Chromium with a profile folder of its own (fresh, in the test's temporary folder): a context without one
    keeps Cache Storage in memory, with a quota below the 500 MB this model's file needs."""

    def __init__(self, browser: object, profile: Path) -> None:
        Page.__init__(self)
        self.local = True
        self.context = browser.browser_type.launch_persistent_context(  # type: ignore[attr-defined]
            str(profile), executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox"],
            viewport={"width": 1280, "height": 1000})
        self.page = self.context.pages[0] if self.context.pages else self.context.new_page()
        self.context.route("**/*", self._route)
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))


def status_when(page: Page, words: str, timeout_s: float = 300) -> str:
    """The status line once it says `words` (or that something was not done)."""
    said = f"() => {{ const t = {STATUS_JS}; return (t.includes({words!r}) || t.includes('Not ')) && t; }}"
    return page.wait_js(said, timeout_s=timeout_s)


@pytest.mark.parametrize("engine", ["chromium", "firefox", "webkit"])
def test_a_124m_model_from_the_hub_in_every_view_generates_and_reopens_from_the_cache(
        engines: Engines, browser: object, engine: str, vendored_site: Path, mirror: Mirror, tmp_path: Path) -> None:
    from playground.app import VIEW_CLASSES

    query = urllib.parse.urlencode({"hf": REPO, "hub": mirror.url, "view": "models", "prompt": PROMPT, **PATCHING})
    with serve(vendored_site) as url, (PersistentChromium(browser, tmp_path / "profile") if engine == "chromium"
                                       else engines.page(engine)) as page:
        page.open(f"{url}index.html?{query}")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        said = status_when(page, "now the model")
        assert f"hub: {REPO} (124." in said and "its files are kept in this browser's cache" in said, said

        missing = {}
        for view, (_, label) in VIEW_CLASSES.items():
            page.click("label", label)
            page.wait_js(f"() => new URLSearchParams(location.search).get('view') === '{view}'", timeout_s=30)
            page.wait_js("document.body.dataset.worker === 'idle'", timeout_s=180)
            try:
                page.wait_js(f"() => new RegExp({DRAWN[view]!r}).test(({VISIBLE_TEXT_JS})())", timeout_s=120)
            except AssertionError:
                missing[view] = page.evaluate(VISIBLE_TEXT_JS)
            page.screenshot(f"real-size-{view}")
            if view == "patching" and page.evaluate(
                    f"() => ({FIND_JS})('button', 'Stop the grid')?.getClientRects().length > 0"):
                page.click("button", "Stop the grid")  # drawn progressively; the whole grid is bench/'s to time
        if missing:  # pytest shortens a long message: the whole text of each view goes to a file
            (ARTIFACTS / f"{engine}-real-size-missing.json").write_text(json.dumps(missing, indent=1))
        assert not missing, f"{sorted(missing)}: see artifacts/site/{engine}-real-size-missing.json"
        assert not re.search(r"Traceback|Error:", page.evaluate(VISIBLE_TEXT_JS))

        # Generate: tokens streamed from the 124M model's weights.
        page.click("label", "Generate")
        page.wait_js("document.body.dataset.worker === 'idle'", timeout_s=60)
        before = page.evaluate(COUNT_TOKENS_JS)
        page.click("button", "Generate")
        generated = page.wait_js(f"(n) => {{ const c = ({COUNT_TOKENS_JS})(); return c >= n && c; }}", before + 8,
                                 timeout_s=240)
        page.wait_js("document.body.dataset.worker === 'idle'", timeout_s=240)
        page.screenshot("real-size-generated")
        assert generated >= before + 8, (before, generated)

        # A reload opens it from the cache: not one request to the mirror.
        asked = len(mirror.requests)
        page.reload()
        page.wait_ready()
        said = status_when(page, "now the model")
        assert "opened from this browser's cache" in said, said
        assert mirror.requests[asked:] == [], mirror.requests[asked:]

        if engine == "chromium":  # refused where the page may not grow its memory to what the model needs
            page.open(f"{url}index.html?{query}&memory=400")
            said = status_when(page, "Not opened", timeout_s=120)
            assert "needs" in said and "MB of memory to load" in said and "grows to at most 400 MB" in said, said
            assert "The model shown before is still loaded." in said

