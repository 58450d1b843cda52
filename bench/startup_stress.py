"""The site's first visit in Firefox, many times over, on a loaded machine: how often does it stall?

Runs what tests/site/test_engines.py's `test_cdn_build_offline_ends_on_the_numpy_panel` runs (the default build on
a host of one kind, every request off 127.0.0.1 refused, so a good start ends on the NumPy panel), `--runs` times
in each engine asked for, with `--burners` processes spinning on the CPU meanwhile. Prints each run's outcome and
time, every failure's stage timings, error panel and console, and the failure rate per engine.

    python bench/startup_stress.py --runs 50 --engines firefox firefox140 --burners 2
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))

from testkit.engines import CHROMIUM, engines_session  # noqa: E402
from testkit.hosts import HOSTS, hosted  # noqa: E402


def spin(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextlib.contextmanager
def burning(n: int) -> Iterator[None]:
    """`n` processes each keeping one core busy (the load of other tests and builds on a CI machine)."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=5)


def build(site: Path) -> Path:
    proc = subprocess.run([sys.executable, str(ROOT / "build.py"), "--site-dir", str(site)], capture_output=True,
                          text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{proc.stdout}\n{proc.stderr}")
    return site


def one_start(engines, engine: str, url: str, log: list, query: str = "") -> tuple[bool, float, str]:  # noqa: ANN001 - testkit's
    """One fresh-profile visit; (ended on the NumPy panel, seconds, what to print when it did not)."""
    log.clear()
    t0 = time.monotonic()
    with engines.page(engine) as page:
        try:
            page.open(url + "index.html" + (f"?{query}" if query else ""))
        except Exception as e:  # noqa: BLE001 - a run that never settles is a failure to report, not a crash
            return False, time.monotonic() - t0, f"never settled: {e}"
        seconds = time.monotonic() - t0
        what, detail = page.text("#error-what") or "", page.text("#error-detail") or ""
        if page.evaluate("document.body.dataset.error") == "1" and "NumPy" in what:
            # Paths a fence turned off on the way (a bounded wait that ran out) still end on the NumPy panel.
            fenced = page.evaluate("JSON.stringify(Object.entries(window.siteInfo?.paths ?? {})"
                                   ".filter(([, v]) => String(v).includes('within')))")
            return True, seconds, "" if fenced == "[]" else f"fenced: {fenced}"
        timings = page.evaluate("JSON.stringify(window.siteInfo?.timings ?? {})")
        timings += f"\n    status line: {page.text('#status')}"
        console = "\n      ".join(page.console or [])
        served = "\n      ".join(f"{at - t0:6.2f} s {event:8} {path}" for at, event, path in list(log))
        return False, seconds, (f"{what}: {detail}\n    stage timings: {timings}\n    console:\n      {console}\n"
                                f"    the host's log:\n      {served}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50, help="visits per engine")
    ap.add_argument("--engines", nargs="+", default=["firefox", "firefox140"])
    ap.add_argument("--host", choices=HOSTS, default="plain")
    ap.add_argument("--burners", type=int, default=2, help="processes spinning on the CPU meanwhile")
    ap.add_argument("--query", default="", help="added to the page's URL, e.g. fallback=all (every optimisation off)")
    ap.add_argument("--site", type=Path, help="a built default site (else one is built into a temporary folder)")
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        site = args.site or build(Path(tmp) / "site")
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox"])
        failures: dict[str, list[str]] = {e: [] for e in args.engines}
        log: list = []  # the host's record of each visit's requests
        with hosted(site, args.host, log=log) as url, engines_session(chromium) as engines, burning(args.burners):
            for i in range(args.runs):
                for engine in args.engines:  # interleaved: both engines see the same moments of load
                    ok, seconds, why = one_start(engines, engine, url, log, args.query)
                    said = "ok" if ok else "FAILED"
                    print(f"{engine:11} run {i + 1:3}: {said} in {seconds:5.1f} s {why if ok else ''}", flush=True)
                    if not ok:
                        failures[engine].append(why)
                        print(f"    {why}", flush=True)
        chromium.close()
    cores = multiprocessing.cpu_count()
    print(f"\n{args.runs} runs per engine, {args.host} host, ?{args.query}, {args.burners} burners, {cores} cores")
    for engine, failed in failures.items():
        print(f"{engine:11} failures {len(failed)}/{args.runs} ({100 * len(failed) / args.runs:.1f} %)")


if __name__ == "__main__":
    main()
