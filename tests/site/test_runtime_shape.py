"""The runtime's shape (issue 30): scripts bundled from small modules (py/sitebuild/bundle.py) that run as classic
scripts and as modules alike, one message protocol (site/src/protocol.js), no swallowed error, and docs/site.md
naming every stage's module. No browser: Node and the sources.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from sitebuild import bundle
from sitebuild.common import BuildError

SRC = ROOT / "site" / "src"
# The hand-written scripts beside the bundles' sources.
HAND_WRITTEN_JS = [ROOT / "site" / name for name in ("fetcher.js", "snapshot.js", "portable.js")]
SOURCES = sorted(SRC.rglob("*.js")) + HAND_WRITTEN_JS


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def node(path: Path) -> str:
    proc = subprocess.run(["node", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_bundle_runs_as_a_classic_script_and_as_a_module(tmp_path: Path) -> None:
    """Named, renamed and namespace imports across folders; each module runs once, dependencies first, in its own
    scope (two modules may use the same top-level name) and in strict mode."""
    write(tmp_path / "src", {
        "shared/names.js": 'export const greeting = "hello";\nexport function shout(s) { return s.toUpperCase(); }\n'
                           'const secret = 1;\nconsole.log("names ran");\n',
        "app/helper.js": 'import { greeting as hi } from "../shared/names.js";\nconst secret = 2;\n'
                         'export class Box { constructor() { this.v = hi; } }\nexport let count = secret;\n',
        "app/main.js": 'import * as names from "../shared/names.js";\nimport { Box, count } from "./helper.js";\n'
                       'const strict = (function () { return this === undefined; })();\n'
                       'console.log(names.shout(new Box().v), count, strict);\n',
    })
    text = bundle.bundle(tmp_path / "src", "app/main.js")
    assert not re.search(r"^\s*(import|export)\b", text, re.M)
    for name in ("classic.js", "module.mjs"):
        (tmp_path / name).write_text(text)
        assert node(tmp_path / name) == "names ran\nHELLO 2 true\n", name


@pytest.mark.parametrize(("files", "said"), [
    ({"main.js": "export default 1;\n"}, "only `import"),
    ({"main.js": 'import x from "./a.js";\n', "a.js": ""}, "only `import"),
    ({"main.js": 'import { a } from "./a.js";\n', "a.js": 'import { b } from "./main.js";\nexport const a = 1;\n'},
     "import cycle"),
    ({"main.js": 'import { a } from "./missing.js";\n'}, "no such module"),
])
def test_what_the_bundler_cannot_read_stops_the_build(tmp_path: Path, files: dict[str, str], said: str) -> None:
    write(tmp_path, files)
    with pytest.raises(BuildError, match=re.escape(said)):
        bundle.bundle(tmp_path, "main.js")


def test_the_sites_bundles_parse_as_scripts_and_as_modules(tmp_path: Path) -> None:
    for entry, name in bundle.BUNDLES.items():
        text = bundle.bundle(SRC, entry)
        for suffix in (".js", ".mjs"):
            path = tmp_path / f"{name}{suffix}"
            path.write_text(text)
            proc = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, (name, suffix, proc.stderr)


def protocol_kinds() -> dict[str, str]:
    text = (SRC / "protocol.js").read_text()
    block = text[text.index("export const MSG"):text.index("});")]
    return dict(re.findall(r"^\s*(\w+): \"([\w-]+)\",", block, re.M))


def test_every_message_kind_is_written_once() -> None:
    """The kinds are strings in protocol.js alone: every other file compares with MSG.X and makes messages with the
    constructors; each kind is received somewhere."""
    kinds = protocol_kinds()
    assert len(kinds) >= 19 and "START" in kinds and kinds["RENDER"] == "render"
    written = re.compile(r"""\btype["'`]?\s*(:|===|!==|==|!=)\s*["'`](""" + "|".join(kinds.values()) + """)["'`]""")
    for path in SOURCES:
        if path.name != "protocol.js":
            assert not written.search(path.read_text()), f"{path}: a message type as a string"
    sources = "\n".join(p.read_text() for p in SOURCES if p.name != "protocol.js")
    for key in kinds:
        assert re.search(rf"\bMSG\.{key}\b", sources), f"{key} is received nowhere"


def test_every_receiver_dispatches_through_protocol_js() -> None:
    """No receiver compares a message's type itself: each maps the types it answers to handlers, and protocol.js's
    dispatch() reads that table."""
    compared = re.compile(r"\.type\s*[!=]==?\s*MSG\.|MSG\.\w+\s*[!=]==?\s*[\w.?]*\.type\b")
    for path in SOURCES:
        if path.name != "protocol.js":
            assert not compared.search(path.read_text()), f"{path}: a message type compared outside dispatch()"
    receivers = [SRC / "worker" / "worker.js", SRC / "page" / "app-worker.js", SRC / "sw" / "sw.js",
                 SRC / "page" / "service-worker.js"]
    for path in receivers:
        assert re.search(r"\bdispatch\(", path.read_text()), f"{path}: receives messages without dispatch()"


DISPATCH_JS = """
import { dispatch, go, kept, MSG } from "./protocol.mjs";
const errors = [];
console.error = (...args) => errors.push(args.join(" "));
const table = { [MSG.GO]: (msg, extra) => `${msg.type} handled with ${extra}` };
const where = "the test's receiver";
const answers = [dispatch(table, go(), where, "its event"), dispatch(table, kept(), where),
  dispatch(table, { type: "toString" }, where), dispatch(table, null, where)];
console.log(JSON.stringify({ answers, errors }));
"""


def test_dispatch_hands_a_message_to_its_handler_and_reports_a_stray_one(tmp_path: Path) -> None:
    """A type in the table: its handler's answer (with the arguments after `where`). Any other, an inherited name
    or no message at all: undefined, and a console error naming the type and the receiver, nothing thrown."""
    (tmp_path / "protocol.mjs").write_text((SRC / "protocol.js").read_text())
    (tmp_path / "dispatch.mjs").write_text(DISPATCH_JS)
    out = json.loads(node(tmp_path / "dispatch.mjs"))
    assert out["answers"] == ["go handled with its event", None, None, None]
    assert len(out["errors"]) == 3, out["errors"]
    for error, kind in zip(out["errors"], ['"kept"', '"toString"', "undefined"], strict=True):
        assert "the test's receiver" in error and kind in error, error


def top_level_names(path: Path) -> set[str]:
    """The names a Python file defines at its top level (a function, or an assignment), top-level await allowed."""
    tree = compile(path.read_text(), str(path), "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_every_python_name_the_workers_read_is_declared_once() -> None:
    """The workers read the app's Python namespace through python-api.js's PY alone; each name there is defined at
    the top level of the file its comment names, and each is read somewhere."""
    api = (SRC / "worker" / "python-api.js").read_text()
    declared = re.findall(r'^\s*(\w+): "(\w+)", // (prelude\.py|boot\.py):', api, re.M)
    assert len(declared) >= 7 and ("WARM_UP", "warm_up", "prelude.py") in declared, declared
    for key, name, file in declared:
        assert name in top_level_names(ROOT / "site" / file), f"site/{file} does not define {name} (PY.{key})"
    sources = "\n".join(p.read_text() for p in SOURCES if p.name != "python-api.js")
    assert not re.search(r"""namespace\.get\(\s*["'`]""", sources), "a Python name written as a string"
    for key, _, _ in declared:
        assert re.search(rf"\bPY\.{key}\b", sources), f"PY.{key} is read nowhere"


def catch_blocks(text: str) -> list[tuple[int, str]]:
    """(line, the handler's text) for each `catch` clause (its block) and `.catch(` call (its argument)."""
    found = []
    for m in re.finditer(r"\bcatch\s*(\([^)]*\))?\s*\{|\.catch\(", text):
        opening = text[m.end() - 1]
        closing = {"{": "}", "(": ")"}[opening]
        depth, end = 0, m.end() - 1
        for end in range(m.end() - 1, len(text)):
            depth += {opening: 1, closing: -1}.get(text[end], 0)
            if depth == 0:
                break
        found.append((text[: m.start()].count("\n") + 1, text[m.start(): end + 1]))
    return found


def test_no_catch_swallows_an_error() -> None:
    """A catch either says which case it handles (a comment on its line or the next) or reports the error (the
    console, the error panel, a rethrow, a rejection)."""
    reports = re.compile(r"console\.(error|warn|info)|throw |reject\(|\.report\(|fail\(|failures\.push|errors\.push"
                         r"|asSiteError|SiteError\(|postMessage\(")
    bad = []
    for path in SOURCES:
        lines = path.read_text().splitlines()
        text = "\n".join(lines)
        for line, block in catch_blocks(text):
            here = "\n".join(lines[line - 1: line + 1])
            if "//" in here or reports.search(block):
                continue
            bad.append(f"{path.relative_to(ROOT)}:{line}: {lines[line - 1].strip()}")
    assert not bad, "\n".join(bad)
    for path in SOURCES:
        assert not re.search(r"throw\s*\[", path.read_text()), f"{path}: an array thrown"
        assert not re.search(r"catch\s*(\([^)]*\))?\s*\{\s*\}", path.read_text()), f"{path}: an empty catch"


def test_docs_name_every_stage_with_its_module() -> None:
    """docs/site.md's stage table names each module of the worker and of the page; worker/worker.js's header says the
    order once, naming the same modules."""
    docs = (ROOT / "docs" / "site.md").read_text()
    for folder in ("worker", "page"):
        for module in sorted((SRC / folder).glob("*.js")):
            assert f"{folder}/{module.name}" in docs, f"docs/site.md does not name site/src/{folder}/{module.name}"
    header = (SRC / "worker" / "worker.js").read_text().split("\nimport ")[0]
    order = re.findall(r"^//   ([A-Za-z][A-Za-z ]+?)\s{2,}(\S+\.js)", header, re.M)
    assert [stage for stage, _ in order] == ["network", "fetch runtime", "start Python", "install packages", "import",
                                             "start the app", "serve"], order
