"""The site's scripts, each written from the small ES modules of ``site/src/`` into one file that runs as a classic
script and as a module alike.

Why one file: the portable file and a sandboxed iframe start the worker from a blob, as a classic script, which
may not import anything; and on the hosted site a module graph would cost a round trip per level before the worker
starts. So each module becomes a function whose value is its exports, called once, in dependency order:

    const $worker_store = (() => { "use strict"; ...; return { modelStore }; })();

and ``import { a, b as c } from "./x.js";`` becomes ``const { a, b: c } = $x;`` (``import * as x`` becomes
``const x = $x;``). The modules keep to what this reads: named or namespace imports of relative paths, and
``export`` before a function, class, const or let declaration.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from .common import BuildError

# site/src/<entry> -> the file written into the site folder.
# Each entry is named after the file it is written to, whose URL browsers and links already know.
BUNDLES = {"page/loader.js": "loader.js", "worker/worker.js": "worker.js", "sw/sw.js": "sw.js"}

IMPORT = re.compile(r'^import\s*(\{[^}]*\}|\*\s*as\s+[A-Za-z_$][\w$]*)\s*from\s*"(\.{1,2}/[^"]+)";?[ \t]*$', re.M)
EXPORT = re.compile(r"^export\s+((?:async\s+)?function\*?|class|const|let)\s+([A-Za-z_$][\w$]*)", re.M)
OTHER = re.compile(r"^\s*(import(\s+|\s*[{*\"'])|export\b)", re.M)


def module_name(rel: str) -> str:
    return "$" + re.sub(r"\W", "_", rel.removesuffix(".js"))


def read_module(src: Path, rel: str) -> tuple[str, list[tuple[str, str]], list[str]]:
    """(body with its imports and exports rewritten, [(dependency, the names it takes)], exported names)."""
    path = src / rel
    if not path.is_file():
        raise BuildError(f"{path}: no such module (imported by the site's scripts)")
    text = path.read_text()
    deps: list[tuple[str, str]] = []

    def take(match: re.Match[str]) -> str:
        dep = posixpath.normpath(posixpath.join(posixpath.dirname(rel), match.group(2)))
        what = match.group(1)
        deps.append((dep, what))
        if what.startswith("*"):  # import * as name
            return f"const {what.split()[-1]} = {module_name(dep)};"
        names = [n.strip() for n in what.strip("{}").split(",") if n.strip()]
        fields = ", ".join(re.sub(r"\s+as\s+", ": ", n) for n in names)
        return f"const {{ {fields} }} = {module_name(dep)};"

    body = IMPORT.sub(take, text)
    exports = [m.group(2) for m in EXPORT.finditer(body)]
    body = EXPORT.sub(lambda m: f"{m.group(1)} {m.group(2)}", body)
    stray = OTHER.search(body)
    if stray:
        line = body[: stray.start()].count("\n") + 1
        raise BuildError(f"{path}:{line}: only `import {{ names }} from \"./file.js\";` and `export` before a "
                         "declaration are bundled")
    return body, deps, exports


def bundle(src: Path, entry: str) -> str:
    """The script of `entry` and every module it imports, each once, dependencies first."""
    order: list[str] = []
    modules: dict[str, tuple[str, list[str]]] = {}
    visiting: list[str] = []

    def visit(rel: str) -> None:
        if rel in modules:
            return
        if rel in visiting:
            raise BuildError(f"site/src: import cycle {' -> '.join([*visiting, rel])}")
        visiting.append(rel)
        body, deps, exports = read_module(src, rel)
        for dep, _ in deps:
            visit(dep)
        visiting.pop()
        modules[rel] = (body, exports)
        order.append(rel)

    visit(entry)
    out = [f"// Written by build.py (py/sitebuild/bundle.py) from site/src/{entry} and what it imports: edit those."]
    for rel in order:
        body, exports = modules[rel]
        out.append(f"\n// ---- site/src/{rel}\nconst {module_name(rel)} = (() => {{\n\"use strict\";\n"
                   f"{body.rstrip()}\nreturn {{ {', '.join(exports)} }};\n}})();")
    return "\n".join(out) + "\n"


def write_bundles(src: Path, site: Path) -> list[str]:
    """Writes each of BUNDLES into `site`; their names."""
    for entry, name in BUNDLES.items():
        (site / name).write_text(bundle(src, entry))
    return list(BUNDLES.values())
