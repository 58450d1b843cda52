// The stages "fetch the runtime" and "start Python": Pyodide's module (imported as soon as the worker runs), its
// lock file, and loadPyodide, which downloads the wasm and the standard library (through network.js).
import { AGAIN, SiteError } from "../protocol.js";

const PYODIDE_MODULE = "Pyodide's module (build/pyodide/pyodide.mjs)";

// The imports a start waits on are bounded: Firefox under load has left a module worker's dynamic import unsettled,
// at times without even requesting the file (bench/startup_stress.py; docs/site-log.md).
export const IMPORT_MS = 10_000;

/** `module` (an import's promise), or null if it has not settled within IMPORT_MS (a failed import still throws). */
function settledWithin(module) {
  let timer;
  const late = new Promise((resolve) => (timer = setTimeout(() => resolve(null), IMPORT_MS)));
  return Promise.race([module, late]).finally(() => clearTimeout(timer));
}

/**
 * A module's import, started at once; awaiting it is bounded. `once`: null if it has not settled within IMPORT_MS
 * (a start goes on without it). Otherwise the module is then imported once more under another URL (a module URL is
 * imported once per worker, so the same one would wait on the same import), and whichever import loads first is
 * the answer: the first may only be slow (a slow network, a loaded machine), and the stage's watchdog ends a
 * wait on two that hang.
 * @returns {() => Promise<object|null>} awaits it (a failure: the SiteError naming `what`)
 */
export function importing(url, what, { once = false } = {}) {
  const first = import(url);
  first.catch(() => undefined); // reported where it is awaited, below
  let module = null;
  const settle = async () => {
    try {
      const got = await settledWithin(first);
      if (got || once) return got;
      console.warn(`[site] ${url} did not load within ${IMPORT_MS / 1000} s: importing it again`);
      return await Promise.any([first, import(url + AGAIN)]);
    } catch (e) {
      const why = e instanceof AggregateError ? e.errors.at(-1) : e; // both failed: the second one's reason
      throw new SiteError(what, String(why.message || why), "runtime");
    }
  };
  return () => (module ??= settle());
}

/**
 * Where loadPyodide comes from: Pyodide's ES module, or in the portable file the classic pyodide.js the page put in
 * front of this worker's script (it defines self.loadPyodide; pyodide.asm.js is there too).
 */
export function pyodideModule(root, embedded) {
  if (embedded) return async () => ({ loadPyodide: self.loadPyodide });
  return importing(`${root}build/pyodide/pyodide.mjs`, PYODIDE_MODULE);
}

/** A text file of the site (fetched through network.js); a failure names it, in `stage`. */
export async function fetchText(ctx, name, what, stage) {
  try {
    const resp = await fetch(`${ctx.root}${name}`);
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    return await resp.text();
  } catch (e) {
    throw new SiteError(`${what} (${name})`, String(e.message || e), stage);
  }
}

/** Pyodide's lock file, parsed (a promise; its failure is reported where it is awaited). */
export function fetchLock(ctx) {
  const lock = fetchText(ctx, "build/pyodide-lock.json", ctx.labels.runtime, "runtime").then(JSON.parse);
  lock.catch(() => undefined); // loadPyodide awaits it and reports it
  return lock;
}

/**
 * pyodide.asm.js, imported here (bounded: `importing`) before loadPyodide would import it: it does not when
 * `_createPyodideModule` is defined, as the file defines it.
 */
async function importRuntimeScript(root) {
  if (typeof self._createPyodideModule === "function") return;
  await importing(`${root}build/pyodide/pyodide.asm.js`, "Pyodide's runtime script (build/pyodide/pyodide.asm.js)")();
}

/**
 * Starts Python.
 * @param extra loadPyodide options (a snapshot's)
 * @returns {Promise<object>} the Pyodide API
 */
export async function startPython(ctx, net, loadPyodide, lock, extra) {
  const { root } = ctx;
  let pyodide;
  try {
    await importRuntimeScript(root);
    pyodide = await loadPyodide({
      indexURL: `${root}build/pyodide/`,
      lockFileContents: lock,
      packageBaseUrl: `${root}build/`,
      stdLibURL: `${root}build/pyodide/python_stdlib.zip`,
      ...extra,
    });
  } catch (e) {
    const assets = net.failedAssets((u) => u.startsWith(root));
    throw new SiteError(ctx.labels.runtime, assets || String(e.message || e), "runtime");
  }
  self.sitePyodide = pyodide; // for the tests and the benchmark (Playwright evaluates in the worker)
  ctx.loaded = () => Object.keys(pyodide.loadedPackages || {});
  net.count(`${root}build/pyodide/pyodide.asm.js`, ctx.manifest.files["build/pyodide/pyodide.asm.js"].size); // imported, not fetched
  return pyodide;
}
