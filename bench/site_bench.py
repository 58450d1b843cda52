#!/usr/bin/env python3
"""Benchmark the static site against a `panel convert --to pyodide-worker` baseline of the same app, in ONE run.

    python bench/site_bench.py [--pyodide-packages .cache/pyodide-packages] [--runs 5] [--warm 2]
    python bench/site_bench.py --skip-build --profile 20mbps --gzip --runs 5 --warm 0

Both sites are served from 127.0.0.1 with every asset local ("localized the same way"): the baseline's
Pyodide/BokehJS/Panel URLs are rewritten to local copies, PANEL_CDN_ROOT points at a local copy of panel/dist,
and micropip installs the unmodified PyPI wheels from local URLs (deps=False: there is no index offline).
Measures, in headless Chromium: bytes served for a cold visit (total and per group; with --gzip, as a host that
gzips text and wasm sends them: bytes on the wire), the first real chart and time to ready cold (fresh browser
context) and warm (reloads: service worker / HTTP cache, V8 code cache, the memory snapshot), wasm heap and page JS
heap after ready. Network profiles (Chromium's network emulation, on the page and on every worker it starts):
localhost (none), 20mbps (20 Mbps / 40 ms), 5mbps (5 Mbps / 100 ms). Writes artifacts/site-bench-<profile>.json
and prints Markdown tables (docs/site.md).
Ready = `body[data-ready="1"]` for the site; for the baseline, Panel's loading class leaving <body> (the point
where its worker has rendered the real document). First real chart: the site's pre-rendered first view
(`siteInfo.timings.firstView`; ready when it is not shown); the baseline's ready (it shows no chart before).
Warm: the first reload after the snapshot is saved (median over the cold visits) and the best reload.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))
from sitebuild import assemble, common, fetch, serve, zips  # noqa: E402
from sitebuild.lock import read_lock  # noqa: E402
from sitebuild.packages import project_tree, sdist_to_tree  # noqa: E402
from testkit.engines import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

OUT = ROOT / "artifacts" / "bench"
# Every host but 127.0.0.1 fails to resolve: nothing leaves the machine, and the HTTP cache keeps working.
BLOCK_OTHER_HOSTS = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


# ------------------------------------------------------------------------------------------- serving


# What a static host that compresses "text and wasm" compresses (zips and wheels are compressed already).
COMPRESSIBLE = (".js", ".mjs", ".css", ".json", ".html", ".py", ".wasm", ".svg", ".txt")


class CountingHandler(serve.SiteHandler):
    """Counts the bytes of every file body served: the payload, or with `gzip` on (a host that compresses text
    and wasm, when the browser accepts it) the bytes on the wire."""

    served: dict[str, int] = defaultdict(int)
    times: dict[str, int] = defaultdict(int)  # bodies served per path: more than one in a cold visit = a waste
    gzip = False
    compressed: dict[str, bytes] = {}

    def send_head(self):  # noqa: ANN201 - signature of the base class
        path = self.translate_path(self.path)
        # A revalidation (If-Modified-Since) goes to the base class, which answers 304 as a host does.
        if not (CountingHandler.gzip and path.endswith(COMPRESSIBLE) and os.path.isfile(path)
                and "gzip" in self.headers.get("Accept-Encoding", "") and "If-Modified-Since" not in self.headers):
            return super().send_head()
        if path not in CountingHandler.compressed:
            CountingHandler.compressed[path] = gzip.compress(Path(path).read_bytes(), 6)
        body = CountingHandler.compressed[path]
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        self.end_headers()
        return io.BytesIO(body)

    def copyfile(self, source, outputfile) -> None:  # noqa: ANN001 - signature of the base class
        size = len(source.getbuffer()) if isinstance(source, io.BytesIO) else os.fstat(source.fileno()).st_size
        CountingHandler.served[self.path.split("?")[0]] += size
        CountingHandler.times[self.path.split("?")[0]] += 1
        super().copyfile(source, outputfile)


# Chromium's network emulation (DevTools protocol), per profile: latency in ms, throughput in bytes/s.
# It holds for the target it is sent to: a page, or a worker. A page's dedicated worker has its requests throttled
# with the page's, a worker that worker starts (site/fetcher.js, the wheels' download thread) does not: measured,
# its wheels came in at ~13 Mbps on the 5 Mbps profile. So emulate_everywhere() sends the conditions to every
# worker too, as each starts, before it runs.
PROFILES = {"localhost": None, "20mbps": {"latency": 40, "throughput": 20e6 / 8},
            "5mbps": {"latency": 100, "throughput": 5e6 / 8}}


def emulate_everywhere(cdp, network: dict) -> None:  # noqa: ANN001 - a Playwright CDPSession on the page
    """The network conditions on the page and on every worker it starts, nested ones included. Workers are attached
    paused (waitForDebuggerOnStart), get the conditions and the same auto-attach, then run. Playwright's CDP session
    speaks to one target, so a worker's session is reached through Target.sendMessageToTarget (non-flat sessions),
    one wrapping per level of nesting."""
    conditions = ("Network.emulateNetworkConditions", {
        "offline": False, "latency": network["latency"], "downloadThroughput": network["throughput"],
        "uploadThroughput": network["throughput"]})
    auto_attach = ("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": False})
    ids = iter(range(1, 1 << 30))

    def send(path: list[str], method: str, params: dict | None = None) -> None:
        """`method` on the target at the end of `path` (sessions from the page down)."""
        if not path:
            cdp.send(method, params or {})
            return
        message: dict = {"id": next(ids), "method": method, "params": params or {}}
        for session in reversed(path[1:]):
            message = {"id": next(ids), "method": "Target.sendMessageToTarget",
                       "params": {"sessionId": session, "message": json.dumps(message)}}
        cdp.send("Target.sendMessageToTarget", {"sessionId": path[0], "message": json.dumps(message)})

    def attached(path: list[str], params: dict) -> None:
        child = [*path, params["sessionId"]]
        steps = [("Network.enable", None), conditions, auto_attach, ("Runtime.runIfWaitingForDebugger", None)]
        for method, args in steps:
            send(child, method, args)

    def received(path: list[str], params: dict) -> None:
        """A message from a worker's session: an event of a worker it attached, or of one further down."""
        event = json.loads(params["message"])
        inner = [*path, params["sessionId"]]
        if event.get("method") == "Target.attachedToTarget":
            attached(inner, event["params"])
        elif event.get("method") == "Target.receivedMessageFromTarget":
            received(inner, event["params"])

    cdp.on("Target.attachedToTarget", lambda params: attached([], params))
    cdp.on("Target.receivedMessageFromTarget", lambda params: received([], params))
    cdp.send("Network.enable")
    cdp.send(*conditions)
    cdp.send(*auto_attach)


def serving(site: Path):  # noqa: ANN201
    import contextlib
    import functools
    import http.server
    import threading

    @contextlib.contextmanager
    def ctx():  # noqa: ANN202
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                 functools.partial(CountingHandler, directory=str(site)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()
            server.server_close()

    return ctx()


# ------------------------------------------------------------------------------------------ baseline


# Panel dependencies the site no longer ships (never imported in the worker) but panel convert installs: the
# baseline keeps them, so that it stays what it was measured as before the site dropped them.
BASELINE_ONLY_WHEELS = {
    "markdown": {"version": "3.11.3", "imports": ["markdown"], "file": "markdown-3.11.3-py3-none-any.whl",
                 "sha256": "e1a31a112232504d753e5c01bb8c2de90d3f0ba986b063e10770cf7695b09e73"},
    "tqdm": {"version": "4.70.1", "imports": ["tqdm"], "file": "tqdm-4.70.1-py3-none-any.whl",
             "sha256": "c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73"},
}


def build_baseline(dest: Path, packages: Path) -> Path:
    """`panel convert --to pyodide-worker` of py/playground/app.py, with every URL made local."""
    lock = read_lock()
    pkg = fetch.fetch_pyodide(lock)
    lock["wheels"].update(BASELINE_ONLY_WHEELS)
    wheels = fetch.cached_or_download(lock["wheels"], common.CACHE / "wheels",
                                      fetch.pip_wheel_args(common.CACHE / "wheels"), "wheel")
    sdists = fetch.cached_or_download(lock["sdists"], common.CACHE / "sdists",
                                      fetch.pip_sdist_args(common.CACHE / "sdists", lock["sdists"]), "sdist")
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "wheels").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        # The app's code as a plain (source) wheel, handed to panel convert as a local requirement.
        make, _ = project_tree(common.PY_DIR)
        (tmpd / "tree").mkdir()
        make(tmpd / "tree")
        app_whl = tmpd / "slm_playground-0.1.0-py3-none-any.whl"
        zips.pack_wheel(tmpd / "tree", app_whl)
        (tmpd / "req.txt").write_text(f"{app_whl}\n")
        subprocess.run([sys.executable, "-m", "panel", "convert", str(common.PY_DIR / "playground" / "app.py"),
                        "--to", "pyodide-worker", "--out", str(dest), "--requirements", str(tmpd / "req.txt")],
                       check=True, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(common.PY_DIR)},
                       capture_output=True)
        # Pure PyYAML from its sdist, sources kept (the baseline does no compiling).
        for name, sd in sdists.items():
            e = lock["sdists"][name]
            (tmpd / name).mkdir()
            sdist_to_tree(sd, e, tmpd / name)
            zips.pack_wheel(tmpd / name, dest / "wheels" / f"{e['dist_name']}-{e['version']}-py3-none-any.whl")
    for whl in wheels.values():
        shutil.copyfile(whl, dest / "wheels" / whl.name)
    (dest / "wheels" / "MarkupSafe-3.0.3-py3-none-any.whl").unlink()  # the wasm build below is used instead

    # Pyodide: the npm files + micropip and the binary wheels, with a lock naming their local hashes.
    pyo = dest / "pyodide"
    shutil.copytree(pkg, pyo)
    official = json.loads((pkg / "pyodide-lock.json").read_text())
    subprocess.run(fetch.pip_wheel_args(common.CACHE / "wheels") + ["micropip==0.11.0"], check=True,
                   capture_output=True)
    local = {"micropip": common.CACHE / "wheels" / "micropip-0.11.0-py3-none-any.whl"}
    for whl in packages.glob("*.whl"):
        local[whl.name.split("-")[0].lower()] = whl
    for name, whl in local.items():
        shutil.copyfile(whl, pyo / whl.name)
        official["packages"][name].update(file_name=whl.name, sha256=common.sha256_file(whl))
    (pyo / "pyodide-lock.json").write_text(json.dumps(official))

    # BokehJS + all of panel/dist, from the wheels; PANEL_CDN_ROOT=./vendor/ as in the site.
    vendor = dest / "vendor"
    with zipfile.ZipFile(wheels["bokeh"]) as zf:
        for n in zf.namelist():
            if n.startswith("bokeh/server/static/js/bokeh") and n.endswith(".min.js"):
                (vendor / "bokeh").mkdir(parents=True, exist_ok=True)
                (vendor / "bokeh" / Path(n).name).write_bytes(zf.read(n))
    with zipfile.ZipFile(wheels["panel"]) as zf:
        for n in zf.namelist():
            if n.startswith("panel/dist/"):
                target = vendor / "1.9.4" / "dist" / n[len("panel/dist/"):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(n))
    html = (dest / "app.html").read_text()
    html = re.sub(r"https://cdn\.bokeh\.org/bokeh/release/(bokeh[a-z-]*)-3\.9\.2\.min\.js",
                  r"vendor/bokeh/\1.min.js", html)
    html = html.replace("https://cdn.holoviz.org/panel/", "./vendor/")
    (dest / "app.html").write_text(html)
    js = (dest / "app.js").read_text()
    js = js.replace("https://cdn.jsdelivr.net/pyodide/v0.29.3/full/pyodide.js", "./pyodide/pyodide.js")
    names = sorted(p.name for p in (dest / "wheels").glob("*.whl"))
    spec = ", ".join([f"'./wheels/{n}'" for n in names] + ["'numpy'", "'markupsafe'",
                                                             "'emfs:packed_wheels/slm_playground-0.1.0-py3-none-any.whl'"])
    js, n = re.subn(r"await micropip\.install\(\[[^\]]*\]\);", f"await micropip.install([{spec}], deps=False);", js)
    assert n == 1, "panel convert's worker changed: micropip.install not found"
    # The app's code is the runPythonAsync whose result is the rendered document.
    marker = "const [docs_json, render_items, root_ids] = await self.pyodide.runPythonAsync(`"
    assert marker in js, "panel convert's worker changed: app code call not found"
    # panel convert prepends its own lines to the app's source, which breaks `from __future__ import ...` (a
    # SyntaxError in the browser): move that line to the top, as the unconverted module has it.
    future = "from __future__ import annotations\\n"
    hoist = future if future in js else ""
    js = js.replace(future, "", 1).replace(
        marker, marker + hoist + "import os\\nos.environ['PANEL_CDN_ROOT'] = './vendor/'\\n")
    (dest / "app.js").write_text(js)
    for text in (html, js):
        leftover = sorted(set(re.findall(r"https://[^\s\"'`)]+", text)))
        if leftover:
            print(f"[bench] baseline still names remote URLs (not fetched unless used): {leftover[:5]}")
    return dest


# ------------------------------------------------------------------------------------------ measuring

GROUPS = (("runtime (Pyodide)", r"pyodide/(pyodide|python_stdlib|pyodide-lock)"),
          ("NumPy (wasm)", r"numpy-"), ("BokehJS + Panel JS/CSS", r"vendor/"),
          ("Python wheels", r"\.whl$|resources\.zip$"), ("page + loader", r"."))


def group_bytes(served: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for path, n in served.items():
        for name, pat in GROUPS:
            if re.search(pat, path):
                out[name] += n
                break
    out["total"] = sum(served.values())
    return dict(out)


MEMORY_JS = """() => ({jsHeap: performance.memory ? performance.memory.usedJSHeapSize : null,
                      wasmHeap: window.siteInfo ? window.siteInfo.heapBytes : null})"""


# A returning visitor comes back to a page at rest, not to one still busy with a visit's background work: the app
# building its hidden tabs in the worker (Playground.hidden_views_pending) and the page rendering them. Before each
# reload the bench waits for that (site only; the baseline builds nothing in the background), then half a second.
APP_PENDING = "() => self.siteNamespace.get('playground').hidden_views_pending"


def settle(page) -> None:  # noqa: ANN001
    worker = page.workers[0] if page.workers else None
    if worker is not None and worker.evaluate("() => Boolean(self.siteNamespace)"):
        while worker.evaluate(APP_PENDING):
            page.wait_for_timeout(100)
    page.wait_for_timeout(500)


def visit(browser, url: str, ready_js: str, warm_runs: int, network: dict | None = None) -> dict:  # noqa: ANN001
    # bypass_csp: Playwright's polling wait_for_function evaluates a string, which the site's CSP forbids.
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, bypass_csp=True)
    # No request routing here: Playwright's routing turns the HTTP cache off, which a visitor's browser has (the
    # baseline's warm reload relies on it). Other hosts cannot be reached anyway (BLOCK_OTHER_HOSTS); any request
    # to one is recorded.
    external: list[str] = []
    context.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1:", "data:", "blob:"))
               else external.append(r.url))
    page = context.new_page()
    if network:
        emulate_everywhere(context.new_cdp_session(page), network)
    CountingHandler.served.clear()
    CountingHandler.times.clear()
    result: dict = {"cold": None, "warm": [], "external": external}
    page.goto(url)
    result["cold"] = page.wait_for_function(ready_js, timeout=300_000, polling=20).json_value()
    result["first_chart"] = page.evaluate("window.siteInfo?.timings?.firstView ?? null") or result["cold"]
    result["cold_stages"] = page.evaluate("window.siteInfo || null")
    page.wait_for_timeout(1500)  # let the service worker finish storing what it fetched
    # The site's next visit starts from the memory snapshot this one leaves behind (site/snapshot.js): wait
    # until it is stored, as a returning visitor would find it.
    result["snapshot"] = page.wait_for_function(
        "document.body.dataset.snapshot === 'saving' ? false : (document.body.dataset.snapshot || 'n/a')",
        timeout=300_000, polling=100).json_value()
    result["bytes"] = group_bytes(dict(CountingHandler.served))
    result["files"] = dict(CountingHandler.served)
    result["twice"] = sorted(p for p, n in CountingHandler.times.items() if n > 1)
    result["memory"] = page.evaluate(MEMORY_JS)
    # The same after a full garbage collection: what the page keeps, without the garbage of the last patches.
    context.new_cdp_session(page).send("HeapProfiler.collectGarbage")
    result["memory"]["jsHeapLive"] = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
    settle(page)
    for _ in range(warm_runs):
        CountingHandler.served.clear()
        page.reload()
        result["warm"].append(page.wait_for_function(ready_js, timeout=300_000, polling=20).json_value())
        settle(page)
    result["warm_bytes"] = sum(CountingHandler.served.values())
    result["stages"] = page.evaluate("window.siteInfo || null")
    result["warm_memory"] = page.evaluate(MEMORY_JS)
    if result["snapshot"] != "n/a":  # the same reload without the snapshot: service worker and code cache only
        result["warm_no_snapshot"] = []
        for _ in range(warm_runs):
            page.goto(url + "?snapshot=0")
            ready = page.wait_for_function(ready_js, timeout=300_000, polling=20).json_value()
            result["warm_no_snapshot"].append(ready)
            settle(page)
    context.close()
    return result


SITE_READY = "document.body.dataset.ready === '1' ? performance.now() : (document.body.dataset.error ? -1 : false)"
BASE_READY = "(window.Bokeh && !document.body.classList.contains('pn-loading')) ? performance.now() : false"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyodide-packages", type=Path, default=ROOT / ".cache" / "pyodide-packages")
    ap.add_argument("--runs", type=int, default=5, help="cold visits per site (alternating)")
    ap.add_argument("--warm", type=int, default=2, help="warm reloads after each cold visit")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="localhost", help="network emulation")
    ap.add_argument("--gzip", action="store_true", help="serve text and wasm gzip-compressed (bytes on the wire)")
    ap.add_argument("--skip-build", action="store_true", help="reuse artifacts/bench/{site,baseline}")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    site, baseline = OUT / "site", OUT / "baseline"
    if not args.skip_build:
        assemble.build(site, common.PY_DIR, args.pyodide_packages)
        build_baseline(baseline, args.pyodide_packages)
    CountingHandler.gzip = args.gzip
    network = PROFILES[args.profile]
    results: dict[str, list[dict]] = {"site": [], "baseline": []}
    with serving(site) as site_url, serving(baseline) as base_url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + BLOCK_OTHER_HOSTS)
        for i in range(args.runs):
            for name, url, ready in (("site", site_url + "index.html", SITE_READY),
                                     ("baseline", base_url + "app.html", BASE_READY)):
                r = visit(browser, url, ready, args.warm, network)
                print(f"[bench] run {i + 1} {name}: first chart {r['first_chart']:.0f} ms, cold {r['cold']:.0f} ms, "
                      f"warm {[round(w) for w in r['warm']]} ms, "
                      f"{r['bytes']['total'] / 1e6:.2f} MB (served twice: {', '.join(r['twice']) or 'none'}), "
                      f"external {len(r['external'])}, snapshot {r['snapshot']}"
                      + (f", warm without snapshot {[round(w) for w in r['warm_no_snapshot']]} ms"
                         if "warm_no_snapshot" in r else ""), flush=True)
                results[name].append(r)
        browser.close()
    OUT.mkdir(parents=True, exist_ok=True)
    tag = args.profile + ("-gzip" if args.gzip else "")
    (ROOT / "artifacts" / f"site-bench-{tag}.json").write_text(json.dumps(results, indent=1))
    print(f"\nProfile {args.profile}, {'gzip (bytes on the wire)' if args.gzip else 'no compression'}, "
          f"{args.runs} interleaved fresh-context visits per site:")
    report(results)
    return 0


def report(results: dict[str, list[dict]]) -> None:
    med = statistics.median

    def summary(rs: list[dict]) -> dict:
        warm = [r["warm"] for r in rs if r["warm"]]
        return {"cold": med(r["cold"] for r in rs), "first_chart": med(r["first_chart"] for r in rs),
                "warm_first": med(w[0] for w in warm) if warm else None,
                "warm_best": med(min(w) for w in warm) if warm else None,
                "bytes": rs[0]["bytes"], "memory": rs[0]["memory"]}

    s, b = summary(results["site"]), summary(results["baseline"])
    n = len(results["site"])
    # Ratios to three decimals: at two, 0.205× would print as 0.20× beside a goal of ≤ 0.20×.
    print("\n| measure | site | baseline | ratio | goal |\n|---|---|---|---|---|")
    print(f"| bytes (cold visit, served) | {s['bytes']['total'] / 1e6:.2f} MB | "
          f"{b['bytes']['total'] / 1e6:.2f} MB | {s['bytes']['total'] / b['bytes']['total']:.3f}× | ≤ 0.35× |")
    print(f"| first real chart, cold (median of {n}) | {s['first_chart'] / 1e3:.2f} s | {b['cold'] / 1e3:.2f} s "
          f"(its ready) | {s['first_chart'] / b['cold']:.3f}× the baseline's ready | 20 Mbps: ≤ 0.07×; 5 Mbps: ≤ 4 s |")
    print(f"| time to ready, cold (median of {n}) | {s['cold'] / 1e3:.2f} s | "
          f"{b['cold'] / 1e3:.2f} s | {s['cold'] / b['cold']:.3f}× | localhost ≤ 0.35×; 20 Mbps ≤ 0.20× |")
    if s["warm_first"] is not None:
        print(f"| time to ready, warm: first reload after the snapshot is saved (median of {n}) | "
              f"{s['warm_first'] / 1e3:.2f} s | {b['warm_first'] / 1e3:.2f} s | "
              f"{s['warm_first'] / b['warm_first']:.3f}× | ≤ 0.15× |")
        print(f"| time to ready, warm: best reload (median of {n} bests) | {s['warm_best'] / 1e3:.2f} s | "
              f"{b['warm_best'] / 1e3:.2f} s | {s['warm_best'] / b['warm_best']:.3f}× | |")
        nosnap = [min(r["warm_no_snapshot"]) for r in results["site"] if r.get("warm_no_snapshot")]
        if nosnap:
            print(f"| … warm without the memory snapshot (`?snapshot=0`) | {med(nosnap) / 1e3:.2f} s | | "
                  f"{med(nosnap) / b['warm_best']:.2f}× | |")
    wasm = s["memory"]["wasmHeap"]
    print(f"| wasm heap after ready | {wasm / 2**20:.0f} MiB | – | | ≤ 80 MB |" if wasm else "| wasm heap | n/a |")
    warm_wasm = results["site"][0].get("warm_memory", {}).get("wasmHeap")
    if warm_wasm and s["warm_first"] is not None:
        print(f"| wasm heap after a warm ready | {warm_wasm / 2**20:.0f} MiB | – | | ≤ 80 MB |")
    print(f"| page JS heap after ready | {s['memory']['jsHeap'] / 1e6:.1f} MB | {b['memory']['jsHeap'] / 1e6:.1f} MB"
          f" | | ≤ 35 MB |")
    print(f"| page JS heap after ready, after a GC | {s['memory']['jsHeapLive'] / 1e6:.1f} MB | "
          f"{b['memory']['jsHeapLive'] / 1e6:.1f} MB | | |")
    print("\n| group | site | baseline |\n|---|---|---|")
    for name, _ in GROUPS:
        print(f"| {name} | {s['bytes'].get(name, 0) / 1e6:.2f} MB | {b['bytes'].get(name, 0) / 1e6:.2f} MB |")


if __name__ == "__main__":
    sys.exit(main())
