"""The kinds of static host a site is copied to, each served on 127.0.0.1 with nothing in between:

- **plain**: what `python -m http.server` and GitHub Pages-like hosts send: no CORS, no cache headers, no
  compression, `.gz` files as `application/gzip` without `Content-Encoding`;
- **gzip**: a host that compresses text, scripts and wasm on the wire (`Content-Encoding: gzip`) when asked;
- **subpath**: the plain host with the site two folders down (`/course/playground/`), as a course page holds it.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import io
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HOSTS = ("plain", "gzip", "subpath")
SUBPATH = "course/playground/"


class PlainHandler(http.server.SimpleHTTPRequestHandler):
    """`python -m http.server` as it is, quiet."""

    def copyfile(self, source, outputfile) -> None:  # noqa: ANN001 - the base class's signature
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a reload drops the connection
            super().copyfile(source, outputfile)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class GzipHandler(PlainHandler):
    """Compresses a response when the client accepts gzip and its type is one hosts compress."""

    COMPRESSED = ("text/", "application/javascript", "application/json", "application/wasm", "image/svg+xml")

    def send_head(self):  # noqa: ANN201 - the base class's signature
        path = Path(self.translate_path(self.path))
        kind = self.guess_type(str(path))
        if (path.is_dir() or not path.is_file() or "gzip" not in self.headers.get("Accept-Encoding", "")
                or not kind.startswith(self.COMPRESSED)):
            return super().send_head()
        body = gzip.compress(path.read_bytes(), compresslevel=6)
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        return io.BytesIO(body)


class Stall:
    """A fault for `hosted`: requests for paths ending in `suffix` (the first `times` of them, or all) get their
    headers and half their bytes, then nothing until `release()` (the connection then closes): a download that stops
    moving."""

    def __init__(self, suffix: str, times: int | None = None) -> None:
        self.suffix = suffix
        self.times = times
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.stalled: list[str] = []
        self.served: list[str] = []  # requests for the path answered in full (after the first `times`)

    def stalls(self, path: str) -> bool:
        """Whether this request stalls; noted before any byte is written (writing half of a large file blocks until
        the browser reads it, which it may not do before its watchdog has given up)."""
        if not path.split("?")[0].endswith(self.suffix) or self.released.is_set():
            return False
        with self.lock:
            if self.times is not None and len(self.stalled) >= self.times:
                self.served.append(path)
                return False
            self.stalled.append(path)
            return True

    def release(self) -> None:
        self.released.set()


def stalling(handler: type[PlainHandler], stall: Stall) -> type[PlainHandler]:
    class Stalling(handler):  # type: ignore[misc, valid-type]
        def send_head(self):  # noqa: ANN201 - the base class's signature
            if not stall.stalls(self.path):
                return super().send_head()
            body = Path(self.translate_path(self.path)).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", self.guess_type(self.path.split("?")[0]))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
            stall.released.wait(timeout=600)
            self.close_connection = True
            return None

    return Stalling


class Offline:
    """A fault for `hosted`: once `go()` is called the host answers nothing (each connection is closed without a
    response), as for a visitor who went offline."""

    def __init__(self) -> None:
        self.gone = threading.Event()

    def go(self) -> None:
        self.gone.set()


def going_offline(handler: type[PlainHandler], offline: Offline) -> type[PlainHandler]:
    class GoingOffline(handler):  # type: ignore[misc, valid-type]
        def send_head(self):  # noqa: ANN201 - the base class's signature
            if offline.gone.is_set():
                self.close_connection = True
                return None
            return super().send_head()

    return GoingOffline


def recording(handler: type[PlainHandler], log: list[tuple[float, str, str]]) -> type[PlainHandler]:
    """Each request's arrival and the end of its answer, as (monotonic seconds, "asked" | "answered", path)."""
    class Recording(handler):  # type: ignore[misc, valid-type]
        def send_head(self):  # noqa: ANN201 - the base class's signature
            log.append((time.monotonic(), "asked", self.path))
            return super().send_head()

        def copyfile(self, source, outputfile) -> None:  # noqa: ANN001 - the base class's signature
            super().copyfile(source, outputfile)
            log.append((time.monotonic(), "answered", self.path))

    return Recording


@contextlib.contextmanager
def hosted(site: Path, host: str, stall: Stall | None = None, offline: Offline | None = None,
           log: list[tuple[float, str, str]] | None = None) -> Iterator[str]:
    """Serve `site` as host kind `host` (HOSTS), with a stalled file if `stall`, answering nothing once `offline`
    has gone, recording every request in `log` if given; yields the URL of the site's folder."""
    if host not in HOSTS:
        raise ValueError(f"unknown host {host!r}; one of {HOSTS}")
    handler = GzipHandler if host == "gzip" else PlainHandler
    if stall is not None:
        handler = stalling(handler, stall)
    if offline is not None:
        handler = going_offline(handler, offline)
    if log is not None:
        handler = recording(handler, log)
    with contextlib.ExitStack() as stack:
        root, prefix = site, ""
        if host == "subpath":
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            (root / SUBPATH).parent.mkdir(parents=True)
            (root / SUBPATH).symlink_to(site.resolve(), target_is_directory=True)
            prefix = SUBPATH
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                 functools.partial(handler, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stack.callback(server.server_close)
        stack.callback(server.shutdown)
        if stall is not None:
            stack.callback(stall.release)
        yield f"http://127.0.0.1:{server.server_address[1]}/{prefix}"

