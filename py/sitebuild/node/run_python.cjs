// Runs a Python file inside the npm Pyodide under Node: the build's steps that need the browser's Python 3.13
// itself (byte-compiling, compiling Jinja templates). Called by sitebuild/node.py as
//   node run_python.cjs <pyodide package dir> <host folder> <script.py> [args...]
// The host folder is mounted at /host; the script gets [script.py, ...args] as sys.argv; any error: exit status 1.
const fs = require("fs");
const path = require("path");

const [pkg, hostDir, script, ...args] = process.argv.slice(2);
const { loadPyodide } = require(path.join(pkg, "pyodide.js"));
globalThis.XMLHttpRequest = class {}; // panel.io.pyodide imports it from `js` (a browser has one)

(async () => {
  // PYTHONNODEBUGRANGES (CPython's -X no_debug_ranges): the bytecode compiled here keeps line numbers but not the
  // column table behind a traceback's ^^^ markers, a quarter of a compressed .pyc (wheels and stdlib together
  // 1.1 MB smaller). Stop if the option does not reach Python.
  const py = await loadPyodide({ indexURL: pkg + "/", env: { HOME: "/home/pyodide", PYTHONNODEBUGRANGES: "1" } });
  if (py.runPython("next(compile('a', '', 'eval').co_positions())[2] is not None")) {
    throw new Error("PYTHONNODEBUGRANGES did not reach Python: the bytecode would keep its column tables");
  }
  py.FS.mkdirTree("/host");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: hostDir }, "/host");
  const argv = py.toPy([script, ...args]);
  py.runPython("import sys; sys.argv = list(argv)", { globals: py.toPy({ argv }) });
  await py.runPythonAsync(fs.readFileSync(script, "utf8"), { filename: script });
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
