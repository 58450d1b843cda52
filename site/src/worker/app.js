// The stages "import" (prelude.py: Panel and the app's module, what a memory snapshot holds) and "start the app"
// (boot.py: the document Panel's 'render' message carries), and "serve": the worker's half of Panel's protocol.
import { idle, patch as patchMessage, ready, render, SiteError, viewsBuilt } from "../protocol.js";
import { post } from "./context.js";
import { lastLines } from "./error-labels.js";
import { PY, PY_MODULES } from "./python-api.js";

/** The manifest's facts prelude.py reads (the app worker's namespace and the snapshot worker's alike). */
export const preludeFacts = (manifest) => ({
  app_module: manifest.app_module,
  app_stylesheet: manifest.app_stylesheet,
  panel_cdn_root: manifest.panel_cdn_root,
});

/**
 * Runs prelude.py in `namespace`: imports each group's module (manifest.import_groups) once its install has settled,
 * Panel once all have, the app once `appInstalled` has. If an install failed, that failure is the one reported.
 * @param {Promise<string>} source prelude.py's text
 * @param {Promise<void>[]} installs the groups' installs (none after a restore)
 */
export async function importApp(ctx, pyodide, namespace, source, installs, appInstalled) {
  const prelude = await source;
  const settled = (p) => p.then(() => null, () => null);
  const groups = ctx.manifest.import_groups.map((g, i) => [g.module, settled(installs[i] ?? Promise.resolve())]);
  const groupsPy = pyodide.toPy(groups);
  namespace.set("import_groups", groupsPy);
  groupsPy.destroy(); // else this proxy keeps the list, and its JS promises, alive: no memory snapshot could be taken
  namespace.set("packages_installed", settled(Promise.all(installs)));
  namespace.set("app_installed", settled(appInstalled));
  // Once every install has settled (the error panel lists what is installed), the first failure if any.
  const allIn = async () => {
    const failure = (await Promise.allSettled([...installs, appInstalled])).find((r) => r.status === "rejected");
    if (failure) throw failure.reason;
  };
  try {
    await pyodide.runPythonAsync(prelude, { globals: namespace, filename: "prelude.py" });
  } catch (e) {
    await allIn();
    throw new SiteError("Starting the app (Python)", lastLines(String(e.message || e)), "app");
  }
  await allIn();
}

/** Runs boot.py: the app's document, as Panel's 'render' message wants it. */
export async function startApp(pyodide, namespace, source) {
  const boot = await source;
  let result;
  try {
    result = await pyodide.runPythonAsync(boot, { globals: namespace, filename: "boot.py" });
  } catch (e) {
    throw new SiteError("Starting the app (Python)", lastLines(String(e.message || e)), "app");
  }
  self.siteNamespace = namespace; // boot.py's names (`playground`), for the tests and the benchmark
  const [docs_json, render_items, root_ids] = result.toJs();
  result.destroy();
  return { docs_json, render_items, root_ids, imports: namespace.get(PY.TIMINGS).toJs({ dict_converter: Object.fromEntries }) };
}

/** Posts the document (Panel's 'render'). */
export function sendRender(ctx, doc, timings, restored) {
  const { docs_json, render_items, root_ids } = doc;
  post(render({ docs_json, render_items, root_ids, timings, snapshot: restored ? "restored" : "none", paths: ctx.paths }));
}

function heapBytes(pyodide) {
  try {
    return pyodide._module.HEAP8.buffer.byteLength;
  } catch (e) {
    return null; // a runtime without that internal: the size is only reported, never needed
  }
}

/**
 * The stage "serve": the app answers the page (Panel's protocol) from here on.
 * @returns {{rendered: () => void, patch: (p: object) => Promise<void>, location: (l: string) => void,
 *   lesson: (request: string) => string, modelNpz: () => Uint8Array}}
 */
export function serve(ctx, pyodide, namespace) {
  // The open lesson's Python side (playground.lesson_host), for the lesson panel's calls.
  const withHost = (use) => {
    const host = pyodide.pyimport(PY_MODULES.LESSON_HOST);
    const playground = namespace.get(PY.PLAYGROUND);
    try {
      return use(host, playground);
    } finally {
      playground.destroy();
      host.destroy();
    }
  };
  const sendPatch = (patch, buffers, msg_id) => post(patchMessage(patch, buffers, msg_id));
  return {
    rendered() {
      namespace.get(PY.LINK_DOCS)(sendPatch);
      post(ready({ heapBytes: heapBytes(pyodide), loaded: Object.keys(pyodide.loadedPackages), fetched: ctx.fetched() }));
      const playground = namespace.get(PY.PLAYGROUND);
      const building = playground.start_building_hidden();
      playground.destroy();
      // The page marks when every view is on it (body[data-views="built"]): tests and benchmarks wait for it.
      building.then(() => post(viewsBuilt()), (e) => console.error("[site] building the hidden views failed:", e))
        .finally(() => building.destroy());
    },
    async patch(patch) {
      try {
        await namespace.get(PY.APPLY_PATCH)(patch);
      } finally {
        post(idle()); // the page sends what it held meanwhile, whatever became of this patch
      }
    },
    location(location) {
      namespace.get(PY.SET_LOCATION)(location);
    },
    lesson: (request) => withHost((host, playground) => host.handle(playground, request)),
    modelNpz: () => withHost((host, playground) => {
      const state = playground.state;
      const lessonHost = host.host_for(state);
      const data = lessonHost.model_npz();
      try {
        return data.toJs();
      } finally {
        for (const proxy of [data, lessonHost, state]) proxy.destroy();
      }
    }),
    namespace,
  };
}
