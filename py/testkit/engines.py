"""One test body, three browser engines: the `engines` fixture (tests/site/conftest.py) opens pages in

- **chromium**: Debian's Chromium through Playwright (the session's `browser`, tests/conftest.py);
- **firefox**: Debian's Firefox ESR through puppeteer-core over WebDriver BiDi (no geckodriver), in a Node
  process running firefox_driver.mjs beside this file; **firefox140** the same with the older ESR (140) that
  students still run, unpacked by tests/run.sh from Debian's package into .cache/;
- **webkit**: WebKitGTK, Safari's engine: Debian's MiniBrowser through Selenium and WebKitWebDriver, on an Xvfb
  display this module starts.

Each page starts with a fresh profile (a Playwright context, a Firefox user context, a new MiniBrowser). Requests to
other hosts are refused (no internet in tests) and recorded in `page.external`: by Playwright's routes in Chromium,
by a refusing proxy (`Refuser`) in Firefox (a profile setting: every ESR honours it) and WebKit. Loopback never
goes through the proxy, so the site under test is served with nothing in between. With `local=False` loopback is
refused too (for pages opened as file:// URLs): by request interception in Firefox; not in WebKit, whose driver
reaches the browser over loopback.

Bokeh and Panel render inside shadow roots, so elements are found by `FIND_JS`, which walks them. The site's CSP
forbids evaluating strings in the page: every engine here calls a function through its protocol instead (CDP,
BiDi script.callFunction, WebDriver's execute script), which page CSPs do not govern.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "site"
ENGINES = ("chromium", "firefox", "firefox140", "webkit")
WIDTH, HEIGHT = 1280, 1000
READY_TIMEOUT_S = 180

# Debian's Chromium (Playwright cannot download its own here), and how every test and benchmark starts it.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]
FIREFOX = "/usr/bin/firefox-esr"
# Debian's older ESR, which students still run: tests/run.sh unpacks it here (ENGINES lists it as "firefox140").
FIREFOXES = {"firefox": FIREFOX,
             "firefox140": ROOT / ".cache" / "firefox-esr-140" / "usr" / "lib" / "firefox-esr" / "firefox-esr"}
FIREFOX_DRIVER = Path(__file__).with_name("firefox_driver.mjs")
WEBKIT_DRIVER = "/usr/bin/WebKitWebDriver"
WEBKIT_SESSION_S = 60  # a new WebKit session starts in 1-10 s, also on a loaded machine
# Debian's libwebkit2gtk-4.1-0 puts MiniBrowser under the architecture's library folder.
MINIBROWSER = next(iter(sorted(Path("/usr/lib").glob("*/webkit2gtk-4.1/MiniBrowser"))),
                   Path("/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"))

# The first element matching a CSS selector (and, if given, whose trimmed text is `text`), searched in the document
# and every open shadow root below it; a rendered element is preferred over a hidden one.
FIND_JS = """(selector, text) => {
  const found = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.matches(selector) && (text == null || el.textContent.trim() === text)) found.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return found.find((el) => el.getClientRects().length > 0) ?? found[0] ?? null;
}"""
# How many elements match, through shadow roots as FIND_JS searches.
COUNT_JS = """(selector) => {
  let n = 0;
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.matches(selector)) n++;
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return n;
}"""
READY_JS = "() => !!document.body && (document.body.dataset.ready === '1' || document.body.dataset.error === '1')"
_FUNCTION = re.compile(r"^\s*(async\s+)?(function\b|\([^()]*\)\s*=>|[\w$]+\s*=>)")


def as_function(js: str) -> str:
    """A function's source as given, or an expression wrapped in one: engines call functions, not strings."""
    return js if _FUNCTION.match(js) else f"() => ({js})"


class Page:
    """An open page in one engine. `console` is None where the engine does not let a test read it (WebKit);
    `requests` (every URL the page and its workers asked for) likewise (WebKit)."""

    engine = ""

    def __init__(self) -> None:
        self.console: list[str] | None = []
        self.requests: list[str] | None = []
        self.external: list[str] = []

    # -- what each engine provides
    def goto(self, url: str) -> None:
        raise NotImplementedError

    def reload(self) -> None:
        raise NotImplementedError

    def evaluate(self, js: str, *args: object) -> object:
        """Call a function (source text) in the page with JSON arguments; its (awaited) JSON result."""
        raise NotImplementedError

    def click(self, selector: str, text: str | None = None) -> None:
        """A real mouse click on the element FIND_JS finds."""
        raise NotImplementedError

    def fill(self, selector: str, text: str) -> None:
        """Focus the element FIND_JS finds, select what it holds and type `text` with real key presses."""
        raise NotImplementedError

    def resize(self, width: int, height: int) -> None:
        """The page's viewport in CSS px (a phone: 360 × 800)."""
        raise NotImplementedError

    def _screenshot(self, path: Path) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- the same in every engine
    def open(self, url: str) -> Page:
        self.goto(url)
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until the page is ready (body[data-ready='1']) or shows its error panel (body[data-error='1'])."""
        self.wait_js(READY_JS, timeout_s=timeout_s)

    def wait_js(self, js: str, *args: object, timeout_s: float = 60, interval_s: float = 0.1) -> object:
        """Poll a function (or expression) until its result is truthy; that result."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(js, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.engine}: timed out after {timeout_s} s waiting for {js}")
            time.sleep(interval_s)

    def text(self, selector: str) -> str | None:
        return self.evaluate(f"(s) => ({FIND_JS})(s)?.textContent ?? null", selector)

    def count(self, selector: str) -> int:
        return self.evaluate(COUNT_JS, selector)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.engine}-{name}.png"
        self._screenshot(path)
        return path

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions so far ([] where the console cannot be read)."""
        return [c for c in self.console or [] if c.startswith(("error", "pageerror"))]

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------------------ Chromium


class ChromiumPage(Page):
    engine = "chromium"

    def __init__(self, browser: object, local: bool) -> None:
        super().__init__()
        self.local = local
        self.context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})  # type: ignore[attr-defined]
        self.page = self.context.new_page()
        self.context.route("**/*", self._route)
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))  # the workers' requests too

    def _route(self, route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if url.startswith(("file:", "data:", "blob:")) or (self.local and url.startswith("http://127.0.0.1:")):
            route.continue_()  # type: ignore[attr-defined]
        else:
            self.external.append(url)
            route.abort()  # type: ignore[attr-defined]

    def goto(self, url: str) -> None:
        self.page.goto(url)

    def reload(self) -> None:
        self.page.reload()

    def evaluate(self, js: str, *args: object) -> object:
        return self.page.evaluate(f"(args) => ({as_function(js)})(...args)", list(args))

    def _element(self, selector: str, text: str | None) -> object:
        element = self.page.evaluate_handle(f"(args) => ({FIND_JS})(...args)", [selector, text]).as_element()
        assert element is not None, f"chromium: no element {selector!r} {text!r}"
        return element

    def click(self, selector: str, text: str | None = None) -> None:
        self._element(selector, text).click()  # type: ignore[attr-defined]

    def fill(self, selector: str, text: str) -> None:
        self._element(selector, None).evaluate("(e) => { e.focus(); e.select?.(); }")  # type: ignore[attr-defined]
        self.page.keyboard.type(text)

    def resize(self, width: int, height: int) -> None:
        self.page.set_viewport_size({"width": width, "height": height})

    def _screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))

    def close(self) -> None:
        self.context.close()


# ------------------------------------------------------------------------------------- a refusing proxy


class Refuser:
    """An HTTP proxy on 127.0.0.1 that refuses every request and records what was asked: a URL for plain HTTP,
    `host:port` for HTTPS (a CONNECT). Firefox and WebKit send what they must not fetch here."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def refuse(self) -> None:
                seen.append(self.path)
                self.send_error(403, "refused by the test proxy (no internet in tests)")

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_CONNECT = refuse

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RefusedSince:
    """The requests a Refuser saw since this page opened (pages in one session open one after the other)."""

    def __init__(self, refuser: Refuser) -> None:
        self.refuser, self.start = refuser, len(refuser.seen)

    def list(self) -> list[str]:
        return self.refuser.seen[self.start:]


# ------------------------------------------------------------------------------------------------- Firefox


class FirefoxDriver:
    """The Node process (firefox_driver.mjs) that holds Firefox; one JSON command and answer a line."""

    def __init__(self, name: str, executable: Path | str, refuser: Refuser) -> None:
        if not Path(executable).exists():
            raise RuntimeError(f"{executable} is not installed (tests/run.sh installs it)")
        if not (ROOT / "node_modules" / "puppeteer-core").is_dir():
            raise RuntimeError("puppeteer-core is not installed: run `npm ci` in the repository (tests/run.sh does)")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.log = open(ARTIFACTS / f"{name}-driver.log", "w")  # noqa: SIM115 - open as long as the process
        self.proc = subprocess.Popen(["node", str(FIREFOX_DRIVER), str(executable), str(WIDTH), str(HEIGHT),
                                      refuser.address],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=ROOT)
        self.refuser = refuser
        self.next_id = 0
        self.version = self.call("version", timeout_s=120)

    def call(self, cmd: str, timeout_s: float = 300, **args: object) -> object:
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, "cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"firefox driver: no answer to {cmd} (see {self.log.name})")
        answer = json.loads(line)
        assert answer["id"] == self.next_id, answer
        if not answer["ok"]:
            raise RuntimeError(f"firefox: {cmd} failed: {answer['error']}")
        return answer["value"]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.refuser.close()


# Hosts Firefox itself talks to (remote settings, telemetry): refused by the proxy like any other, but not the page's.
FIREFOX_OWN = re.compile(r"^(https?://)?[^/:]*\.(mozilla\.(com|net|org)|firefox\.com)(:443)?(/|$)")


class FirefoxPage(Page):
    engine = "firefox"

    def __init__(self, engine: str, driver: FirefoxDriver, refuser: Refuser, local: bool) -> None:
        super().__init__()
        self.engine = engine
        self.driver = driver
        self.refused = RefusedSince(refuser)
        self.refused_here: list[str] = []  # loopback requests this page refused itself (local=False)
        self.id = driver.call("newPage", local=local)

    def _events(self) -> None:
        events = self.driver.call("events", page=self.id)
        self.console.extend(events["console"])  # type: ignore[union-attr]
        self.requests.extend(events["requests"])  # type: ignore[union-attr]
        self.refused_here.extend(events["refused"])  # type: ignore[union-attr]
        self.external[:] = [u for u in self.refused.list() if not FIREFOX_OWN.match(u)] + self.refused_here

    def goto(self, url: str) -> None:
        self.driver.call("goto", page=self.id, url=url)
        self._events()

    def reload(self) -> None:
        self.driver.call("reload", page=self.id)
        self._events()

    def evaluate(self, js: str, *args: object) -> object:
        value = self.driver.call("evaluate", page=self.id, source=as_function(js), args=list(args))
        self._events()
        return value

    def click(self, selector: str, text: str | None = None) -> None:
        self.driver.call("click", page=self.id, find=FIND_JS, args=[selector, text])

    def fill(self, selector: str, text: str) -> None:
        self.driver.call("type", page=self.id, find=FIND_JS, args=[selector, None], text=text)

    def resize(self, width: int, height: int) -> None:
        self.driver.call("viewport", page=self.id, width=width, height=height)

    def _screenshot(self, path: Path) -> None:
        self.driver.call("screenshot", page=self.id, path=str(path))

    def close(self) -> None:
        self._events()
        self.driver.call("closePage", page=self.id)


# -------------------------------------------------------------------------------------------------- WebKit


class Xvfb:
    """A virtual X display for MiniBrowser (WebKitGTK has no headless mode); Xvfb picks a free display number."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["Xvfb", "-displayfd", "1", "-screen", "0", f"{WIDTH + 200}x{HEIGHT + 200}x24",
                                      "-nolisten", "tcp"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        number = self.proc.stdout.readline().strip() if ready else ""
        if not number:
            self.close()
            raise RuntimeError("Xvfb did not start (apt-get install xvfb; tests/run.sh does it)")
        self.display = f":{number}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


class WebKitPage(Page):
    """A new MiniBrowser for every page (a fresh, ephemeral profile). WebKitWebDriver offers no console log and
    no request events: `console` and `requests` are None. Proxies come from the environment (WebDriver's proxy
    capability leaves HTTPS unproxied in WebKitGTK); loopback stays direct, as the driver needs it."""

    engine = "webkit"

    def __init__(self, display: str, refuser: Refuser) -> None:
        from selenium import webdriver
        from selenium.webdriver.webkitgtk.service import Service

        super().__init__()
        self.console = self.requests = None
        self.refused = RefusedSince(refuser)
        options = webdriver.WebKitGTKOptions()
        options.binary_location = str(MINIBROWSER)
        options.add_argument("--automation")
        proxy = f"http://{refuser.address}"
        env = {**os.environ, "DISPLAY": display, "http_proxy": proxy, "https_proxy": proxy,
               "no_proxy": "127.0.0.1,localhost"}
        for attempt in (1, 2):
            service = Service(executable_path=WEBKIT_DRIVER, env=env)
            # WebKitWebDriver at times never answers the new-session request (no MiniBrowser started), and Selenium
            # waits without a limit: the driver is then stopped, which fails the request, and started once more.
            timer = threading.Timer(WEBKIT_SESSION_S, lambda service=service: _stop_quietly(service))
            timer.start()
            try:
                self.driver = webdriver.WebKitGTK(options=options, service=service)
                break
            except Exception:
                if attempt == 2:
                    raise
            finally:
                timer.cancel()
        self.driver.set_window_size(WIDTH, HEIGHT)
        self.driver.set_script_timeout(120)

    def goto(self, url: str) -> None:
        self.driver.get(url)
        self.external[:] = self.refused.list()

    def reload(self) -> None:
        self.driver.refresh()
        self.external[:] = self.refused.list()

    def evaluate(self, js: str, *args: object) -> object:
        # WebDriver's execute script awaits a returned promise.
        value = self.driver.execute_script(f"return ({as_function(js)}).apply(null, arguments);", *args)
        self.external[:] = self.refused.list()
        return value

    def _element(self, selector: str, text: str | None) -> object:
        element = self.driver.execute_script(f"const e = ({FIND_JS}).apply(null, arguments); "
                                             "e?.scrollIntoView({block: 'center'}); return e;", selector, text)
        assert element is not None, f"webkit: no element {selector!r} {text!r}"
        return element

    def click(self, selector: str, text: str | None = None) -> None:
        from selenium.webdriver.common.action_chains import ActionChains

        # Pointer actions, not WebElement.click(): WebKit's hit test for the latter stops at the shadow host and
        # reports the click as intercepted.
        ActionChains(self.driver).move_to_element(self._element(selector, text)).click().perform()

    def fill(self, selector: str, text: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains

        self.driver.execute_script("arguments[0].focus(); arguments[0].select?.();", self._element(selector, None))
        ActionChains(self.driver).send_keys(text).perform()

    def resize(self, width: int, height: int) -> None:
        # WebDriver sizes the window, not the viewport: grow it by what the browser's frame takes. MiniBrowser's
        # window is never narrower than its toolbar (~450 px).
        frame = self.evaluate("[outerWidth - innerWidth, outerHeight - innerHeight]")
        self.driver.set_window_size(width + frame[0], height + frame[1])

    def _screenshot(self, path: Path) -> None:
        self.driver.save_screenshot(str(path))

    def close(self) -> None:
        self.driver.quit()


# -------------------------------------------------------------------------------------------- all of them


def _stop_quietly(service: object) -> None:
    with contextlib.suppress(Exception):  # not started yet, or already gone
        service.stop()  # type: ignore[attr-defined]


class Engines:
    """Starts each engine when a test first asks for it; closes them at the end of the session."""

    def __init__(self, chromium: object) -> None:
        self.chromium = chromium
        self._firefox: dict[str, FirefoxDriver] = {}  # engine name -> its Firefox
        self._xvfb: Xvfb | None = None
        self._refuser: Refuser | None = None

    def refuser(self) -> Refuser:
        if self._refuser is None:
            self._refuser = Refuser()
        return self._refuser

    def page(self, engine: str, local: bool = True) -> Page:
        """A page with a fresh profile; requests off 127.0.0.1 (with local=False: all requests) are refused."""
        if engine == "chromium":
            return ChromiumPage(self.chromium, local)
        if engine in FIREFOXES:
            if engine not in self._firefox:
                # A proxy of its own: Firefox's background requests must not land in another engine's list.
                refuser = Refuser()
                self._firefox[engine] = FirefoxDriver(engine, FIREFOXES[engine], refuser)
            driver = self._firefox[engine]
            return FirefoxPage(engine, driver, driver.refuser, local)
        if engine == "webkit":
            for path in (WEBKIT_DRIVER, MINIBROWSER):
                if not Path(path).exists():
                    raise RuntimeError(f"{path} is missing: apt-get install webkit2gtk-driver (tests/run.sh does)")
            if self._xvfb is None:
                self._xvfb = Xvfb()
            return WebKitPage(self._xvfb.display, self.refuser())
        raise ValueError(f"unknown engine {engine!r}; one of {ENGINES}")

    def close(self) -> None:
        for part in (*self._firefox.values(), self._xvfb, self._refuser):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()


@contextlib.contextmanager
def engines_session(chromium: object) -> Iterator[Engines]:
    engines = Engines(chromium)
    try:
        yield engines
    finally:
        engines.close()
