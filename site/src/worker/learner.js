// The learner's worker: a worker.js the lesson panel starts with 'learner-start' to run a learner's code and a
// challenge's check (lessons.run_challenge), and ends (terminate) when a run takes longer than the time limit.
// Python with NumPy, slm and lessons (manifest.learner_packages), no Panel; one run per worker: learner code may
// change shared modules (slm.layers.layer_norm = ...), so each run gets a fresh interpreter (site/src/lesson/).
import { learnerReady, verdict } from "../protocol.js";
import { compileOptions } from "./compile.js";
import { post } from "./context.js";
import { network } from "./network.js";
import { loadPackagesWith } from "./packages.js";
import { PY_MODULES } from "./python-api.js";
import { fetchLock, pyodideModule, startPython } from "./runtime.js";

// Turns the page's message into run_challenge's call: the model's bytes (or None) as Python bytes.
// (Its lines are joined here: bundle.py reads a line starting with "import" as a module's import.)
const RUN = "learner_run"; // the function RUN_PY defines, which run() calls
const RUN_PY = [
  `from ${PY_MODULES.LESSONS} import run_challenge`,
  "import json, slm",
  `def ${RUN}(code, check, model):`,
  "    data = None if model is None else model.to_bytes()",
  "    return json.dumps(run_challenge(code, check, model=data).to_dict())",
].join("\n");

/**
 * Starts Python and the packages, imports lessons and slm (a first run should not wait for them), then answers
 * 'learner-run' with 'verdict'.
 * @param {() => Promise<object>} pyodideImport the worker's import of Pyodide's module, begun when it loaded
 * @returns {{run: (msg: object) => void}}
 */
export async function startLearner(ctx, msg, pyodideImport) {
  const t0 = performance.now();
  const net = network(ctx, { keep: false, files: msg.files });
  compileOptions(ctx, net);
  const { loadPyodide } = await (pyodideImport || pyodideModule(ctx.root, Boolean(msg.files)))();
  const pyodide = await startPython(ctx, net, loadPyodide, fetchLock(ctx), {});
  await loadPackagesWith(pyodide, net)(ctx.manifest.learner_packages, "the packages your code can import");
  const namespace = pyodide.globals.get("dict")();
  await pyodide.runPythonAsync(RUN_PY, { globals: namespace, filename: "learner.py" });
  const learnerRun = namespace.get(RUN);
  post(learnerReady(performance.now() - t0));
  return {
    run(run) {
      const started = performance.now();
      // undefined, not null, becomes None (null is pyodide.ffi.jsnull); the model's bytes a JsProxy (to_bytes()).
      const model = run.model ? new Uint8Array(run.model) : undefined;
      try {
        const answer = learnerRun(run.code, run.check ?? undefined, model);
        post(verdict(JSON.parse(answer), performance.now() - started));
      } catch (e) {
        // run_challenge reports whatever the code raises: this is the interpreter itself failing (out of memory).
        post(verdict({ status: "error", message: `Python stopped: ${String(e.message || e).split("\n").slice(-2).join(" ")}`,
          stdout: "", line: null, passed: false }, performance.now() - started));
      }
    },
  };
}
