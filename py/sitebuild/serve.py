"""The development server: ``site/`` on 127.0.0.1, every response revalidated (the service worker is the cache)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .common import SITE


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".mjs": "text/javascript", ".js": "text/javascript", ".whl": "application/zip",
                      ".json": "application/json", ".py": "text/plain"}

    def end_headers(self) -> None:
        # Revalidate every time: the service worker is the cache; a rebuild must be seen at once.
        self.send_header("Cache-Control", "no-cache")
        # Public files, readable from any origin: embed.html in an iframe sandboxed without allow-same-origin has
        # an opaque origin, and reads worker.js, loader.js and Pyodide's module with CORS (as static hosts allow).
        self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()

    def copyfile(self, source, outputfile) -> None:  # noqa: ANN001 - signature of the base class
        # A reload or a closed tab drops the connection mid-file: not an error worth a traceback.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().copyfile(source, outputfile)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature of the base class
        if os.environ.get("SITE_SERVER_LOG"):
            super().log_message(format, *args)


@contextlib.contextmanager
def serving(site: Path = SITE, port: int = 0, handler_class: type[SiteHandler] | None = None) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 in a thread (with ``handler_class``, a SiteHandler of a test's own); yields the
    base URL."""
    handler = functools.partial(handler_class or SiteHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
