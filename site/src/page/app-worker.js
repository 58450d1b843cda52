// The app worker (worker.js) from the page's side: starting it, and the page's half of Panel's pyodide-worker
// protocol (adapted from panel/_templates/pyodide_handler.js) with the loader's messages (protocol.js).
import * as M from "../protocol.js";
import { dispatch, MSG, SiteError } from "../protocol.js";
import { $, body, embed, info, opaque, serviceWorkers, useSnapshot } from "./env.js";
import { embeddedFile, localPatch, portable, portableModels, workerFiles } from "./portable-file.js";
import { attach, fail, progressed, showProgress, showStage, stopWatchdog } from "./screen.js";
import { embedDocument } from "./scripts.js";
import { keepForNextVisit, thisBuilds } from "./service-worker.js";

/**
 * Starts the worker. A page with an opaque origin makes it from a blob of worker.js's text, as a classic worker
 * (there a module worker from a URL or a blob is refused), and tells it the site's root with 'start'.
 */
export function spawnWorker() {
  return newWorker().then(watchWorker);
}

/** A worker.js, not yet told what to be (the app's, or a learner's: site/src/lesson/learner.js). */
export async function newWorker() {
  if (!opaque) return new Worker("worker.js", { type: "module" });
  return new Worker(URL.createObjectURL(await workerSource()));
}

async function workerSource() {
  // The portable file's worker script carries Pyodide's runtime script and its classic loader in front of
  // worker.js: engines differ in which blob: URLs a worker may load scripts from (Chromium only its own, WebKit
  // only its page's), so it loads none.
  if (portable) {
    const parts = ["build/pyodide/pyodide.asm.js", "build/pyodide/pyodide.js", "worker.js"];
    const [runtime, loader, worker] = await Promise.all(parts.map(embeddedFile));
    return new Blob([runtime, "\n;\n", loader, "\n;\n", worker], { type: "text/javascript" });
  }
  try {
    const resp = await fetch("worker.js");
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    return new Blob([await resp.text()], { type: "text/javascript" });
  } catch (e) {
    throw new SiteError("Loading the worker (worker.js)", `${e.message || e} (a page in a sandboxed iframe reads the site's files with CORS: the host must send Access-Control-Allow-Origin)`, "runtime");
  }
}

function watchWorker(w) {
  w.onerror = (e) => fail({ what: "The Python worker crashed", detail: e.message || "worker error" });
  w.onmessageerror = () => fail({ what: "The Python worker crashed", detail: "a message could not be decoded" });
  attach(w);
  return w;
}

/** The page's location for pn.state.location (the worker's own location is worker.js). */
export function pageLocation() {
  const loc = JSON.parse(JSON.stringify(window.location));
  if (embed) {
    const params = new URLSearchParams(loc.search);
    params.set("embed", "1");
    loc.search = `?${params}`;
  }
  return JSON.stringify(loc);
}

/**
 * Talks to the worker until the app is ready, and from then on carries the app's changes both ways.
 * @param {Promise<void>} mainJs the page's scripts, loading
 * @param {{ready: (msg: object) => void, viewsBuilt: () => void}} hooks what the page does once the app is live, and
 *   once every view is built
 */
export async function startWorker(worker, manifest, mainJs, hold, fallbacks, hooks) {
  let busy = false;
  let queue = [];
  let jsdoc = null;
  let patching = 0;

  let flushing = false;
  const flush = () => {
    flushing = false;
    if (busy || !queue.length) return;
    busy = true;
    body.dataset.worker = "busy"; // until 'idle' with nothing held: tests wait for the answer to a click
    worker.postMessage(M.patch(jsdoc.create_json_patch(queue)));
    queue = [];
  };
  const sendChange = (event) => {
    if ((event.setter_id != null && event.setter_id === "py") || patching > 0) return;
    // Held until the worker is idle, in order: a Generate click must not overtake the prompt typed just before
    // it. A property change replaces an older change of the same property, unless a click or another event
    // stands between them.
    if (event.model && event.attr) {
      const barrier = queue.findLastIndex((e) => !(e.model && e.attr)) + 1;
      const same = (e) => e.model === event.model && e.attr === event.attr;
      queue = [...queue.slice(0, barrier), ...queue.slice(barrier).filter((e) => !same(e))];
    }
    queue.push(event);
    // The changes one widget makes at once (a file input's value, filename and mime_type) go in one patch.
    if (!busy && !flushing) {
      flushing = true;
      queueMicrotask(flush);
    }
  };

  // The app worker's messages, each to its handler.
  const fromWorker = {
    [MSG.PROGRESS]: (msg) => showProgress(msg.bytes, msg.extraTotal, msg.waiting),
    [MSG.STAGE]: (msg) => showStage(msg.stage),
    [MSG.STATUS]: (msg) => {
      $("#status").textContent = msg.msg;
    },
    [MSG.ERROR]: (msg) => {
      info.loadedPackages = msg.loaded || [];
      Object.assign(info.paths, msg.paths);
      fail(msg, false);
      keepForNextVisit(manifest.build_id, msg.fetched || []); // an offline visit then gets as far
    },
    [MSG.RENDER]: async (msg) => {
      $("#status").textContent = "Rendering";
      info.timings.app = performance.now();
      info.worker = msg.timings;
      info.snapshot = msg.snapshot;
      Object.assign(info.paths, msg.paths);
      try {
        await mainJs;
      } catch (e) {
        fail({ what: e.what || "Loading the page", detail: e.detail || String(e), stage: "runtime" });
        return;
      }
      try {
        jsdoc = await embedDocument(msg);
      } catch (e) {
        fail({ what: "Rendering the app (BokehJS)", detail: String(e.stack || e), stage: "app" });
        return;
      }
      jsdoc.on_change(sendChange, false);
      $("#app").inert = false;
      $("#app").removeAttribute("aria-busy");
      info.timings.render = performance.now();
      worker.postMessage(M.rendered());
      worker.postMessage(M.locationOf(pageLocation()));
    },
    [MSG.READY]: (msg) => {
      stopWatchdog();
      info.timings.ready = performance.now();
      info.heapBytes = msg.heapBytes;
      info.loadedPackages = msg.loaded;
      $("#loading").hidden = true;
      delete body.dataset.firstView; // the live app has replaced the picture: no longer dimmed (style.css)
      body.dataset.ready = "1";
      hooks.ready(msg);
    },
    [MSG.VIEWS_BUILT]: () => {
      body.dataset.views = "built";
      hooks.viewsBuilt();
    },
    [MSG.IDLE]: () => {
      busy = false;
      if (queue.length) {
        flush();
      } else {
        body.dataset.worker = "idle";
      }
    },
    [MSG.PATCH]: (msg) => {
      try {
        patching += 1;
        jsdoc.apply_json_patch(localPatch(msg.patch), msg.buffers);
      } finally {
        patching -= 1;
      }
    },
  };
  worker.onmessage = async (event) => {
    const msg = event.data;
    progressed(JSON.stringify([msg.type, msg.bytes, msg.waiting, msg.stage, msg.msg]));
    await dispatch(fromWorker, msg, "the page (the app worker's messages)");
  };
  // No service worker controls a first visit: the worker stores its downloads itself (worker.js `keep`).
  const keep = serviceWorkers && "caches" in self && !thisBuilds(manifest.build_id);
  // A page a service worker serves gets the wheels from its cache: the worker downloads them without a thread.
  const controlled = Boolean(serviceWorkers && navigator.serviceWorker.controller);
  // A worker made from a blob learns the site's root here, and in the portable file gets the files themselves.
  const root = new URL("./", location.href).href;
  const [files, transfer] = portable ? await workerFiles() : [null, []];
  const models = portable ? await portableModels() : null;
  worker.postMessage(
    M.start({ manifest, location: pageLocation(), snapshot: useSnapshot, keep, controlled, root, files, hold, models, fallbacks }),
    [...transfer, ...(models || []).map((m) => m.data)],
  );
}

/**
 * The next visit starts from a memory snapshot of this one's interpreter (snapshot.js): made by a second worker, so
 * the app stays as it is; a failure only costs the next visit its head start. It starts once the service worker
 * has what this visit fetched (`kept`): its own downloads are then served from there.
 */
export async function saveSnapshot(manifest, kept) {
  body.dataset.snapshot = "saving";
  await kept;
  const maker = new Worker("worker.js", { type: "module" });
  const done = (outcome, detail) => {
    maker.terminate();
    body.dataset.snapshot = outcome;
    info.snapshotSaved = detail;
    if (outcome === "failed") console.warn("[site] no memory snapshot for the next visit:", detail);
  };
  maker.onerror = (e) => done("failed", e.message || "worker error");
  // The snapshot worker's messages, each to its handler. Its downloads' progress is not shown: the app is up.
  const fromMaker = {
    [MSG.SNAPSHOT_MADE]: (msg) => done("saved", { bytes: msg.bytes, ms: msg.ms }),
    [MSG.ERROR]: (msg) => done("failed", `${msg.what}: ${msg.detail}`),
    [MSG.PROGRESS]: () => undefined,
  };
  maker.onmessage = (event) => dispatch(fromMaker, event.data, "the page (the snapshot worker's messages)");
  maker.postMessage(M.makeSnapshot(manifest));
}
