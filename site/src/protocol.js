// The messages between the page (loader.js, and lesson.js once a lesson opens), the app worker (worker.js), the
// snapshot worker and the learner's worker (more worker.js instances) and the service worker (sw.js), defined here once: each is made by its constructor below, and each receiver maps
// the types it answers to their handlers in a table that dispatch() below reads. Panel's own pyodide-worker messages
// (panel/_templates/pyodide_worker.js) keep their names: status, render, patch, idle, rendered, location.

export const MSG = Object.freeze({
  // page -> app worker
  START: "start",
  GO: "go",
  RENDERED: "rendered", // Panel's
  LOCATION: "location", // Panel's
  PATCH: "patch", // Panel's, both ways
  FILES: "files",
  EXPORT_MODELS: "export-models",
  LESSON: "lesson",
  LESSON_MODEL: "lesson-model",
  // app worker -> page
  STATUS: "status", // Panel's
  STAGE: "stage",
  PROGRESS: "progress",
  RENDER: "render", // Panel's
  IDLE: "idle", // Panel's
  READY: "ready",
  VIEWS_BUILT: "views-built",
  ERROR: "error",
  // page <-> snapshot worker
  MAKE_SNAPSHOT: "make-snapshot",
  SNAPSHOT_MADE: "snapshot-made",
  // page <-> learner's worker
  LEARNER_START: "learner-start",
  LEARNER_READY: "learner-ready",
  LEARNER_RUN: "learner-run",
  VERDICT: "verdict",
  // page <-> service worker
  KEEP: "keep",
  KEPT: "kept",
});

// What the app worker appends to a module's URL to import it a second time (worker/runtime.js); sw.js keeps the
// file under its own URL.
export const AGAIN = "?again";

/**
 * An error the page shows on its panel: `what` failed (its heading), `detail` says why, `stage` is the start-up
 * stage it failed in (a key of the manifest's site.stages, or a page stage such as "manifest"), null if none.
 */
export class SiteError extends Error {
  constructor(what, detail, stage = null) {
    super(`${what}: ${detail}`);
    this.name = "SiteError";
    this.what = what;
    this.detail = detail;
    this.stage = stage;
  }
}

/** A SiteError for anything thrown: itself if it is one, else `what` with the error's message (or stack). */
export function asSiteError(e, what, stage = null) {
  if (e instanceof SiteError) return e;
  return new SiteError(what, String(e?.stack || e?.message || e), stage);
}

/**
 * Hands `msg` to its handler in `table` ({[MSG.X]: (msg, ...rest) => ...}, the receiver's) with `rest`, and returns
 * what the handler returns. A type the table lacks is reported on the console, naming it and `where` (the
 * receiver), and otherwise ignored: a stray message must not stop the page or a worker.
 */
export function dispatch(table, msg, where, ...rest) {
  const type = msg?.type;
  if (!Object.prototype.hasOwnProperty.call(table, type)) {
    console.error(`[site] ${where}: no handler for a message of type ${JSON.stringify(type)}`);
    return undefined;
  }
  return table[type](msg, ...rest);
}

// ------------------------------------------------------------------------------------ page -> app worker

/**
 * @typedef {object} Start Begins the start-up (page -> app worker).
 * @property {object} manifest build/manifest.json
 * @property {string} location the page's window.location as JSON (pn.state.location)
 * @property {boolean} snapshot whether a memory snapshot may be used
 * @property {boolean} keep store this visit's runtime files in the build's cache (no service worker yet)
 * @property {boolean} controlled a service worker serves the page
 * @property {string} root the site's URL (a worker made from a blob cannot tell)
 * @property {Object<string, {bytes: ArrayBuffer, type: string}>|null} files the portable file's files
 * @property {boolean} hold request the runtime only on 'go'
 * @property {Array<{key: string, name: string, bytes: number, saved: number, data: ArrayBuffer}>|null} models
 *   the portable file's models
 * @property {string[]} fallbacks optimisations to leave out (?fallback=...): their plain path is taken
 */
/** @returns {Start & {type: string}} */
export const start = ({ manifest, location, snapshot, keep, controlled, root, files, hold, models, fallbacks }) =>
  ({ type: MSG.START, manifest, location, snapshot, keep, controlled, root, files, hold, models, fallbacks });

/** The first view's bytes are in: the worker may request the runtime's. */
export const go = () => ({ type: MSG.GO });

/** Panel's: the document is on the page. */
export const rendered = () => ({ type: MSG.RENDERED });

/** Panel's: the page's location changed (JSON of window.location). */
export const locationOf = (location) => ({ type: MSG.LOCATION, location });

/** Panel's: a document patch, page -> worker (JSON) or worker -> page (with its buffers and message id). */
export const patch = (patch, buffers = undefined, msg_id = undefined) => ({ type: MSG.PATCH, patch, buffers, msg_id });

/** Files dropped on the page: [[path, ArrayBuffer], ...]. */
export const files = (files) => ({ type: MSG.FILES, files });

/** Asks for the model store's models with their bytes, answered on the message's port. */
export const exportModels = () => ({ type: MSG.EXPORT_MODELS });

/**
 * A call of the open lesson's Python side (playground.lesson_host: `request` is its JSON, {op, ...}), answered with
 * its JSON on the message's port.
 */
export const lesson = (request) => ({ type: MSG.LESSON, request });

/** Asks for the model the app shows, as .npz bytes (a Uint8Array), answered on the message's port. */
export const lessonModel = () => ({ type: MSG.LESSON_MODEL });

// ------------------------------------------------------------------------------------ app worker -> page

/** Panel's: a line of status text. */
export const status = (msg) => ({ type: MSG.STATUS, msg });

/** A start-up stage began (a key of the manifest's site.stages). */
export const stage = (stage) => ({ type: MSG.STAGE, stage, t: performance.now() });

/**
 * Bytes downloaded per stage, totals learnt from Content-Length, and the files asked for whose last byte is not in
 * (their names).
 */
export const progress = (bytes, extraTotal, waiting) => ({ type: MSG.PROGRESS, bytes, extraTotal, waiting });

/**
 * Panel's: the document, and for the loader the worker's timings, whether it started from a snapshot and which
 * path each optimisation took ({name: "on" | "off: why"}).
 */
export const render = ({ docs_json, render_items, root_ids, timings, snapshot, paths }) =>
  ({ type: MSG.RENDER, docs_json, render_items, root_ids, timings, snapshot, paths });

/** Panel's: the worker has applied the page's patches. */
export const idle = () => ({ type: MSG.IDLE });

/** The app is live. */
export const ready = ({ heapBytes, loaded, fetched }) => ({ type: MSG.READY, heapBytes, loaded, fetched });

/** Every hidden view is built. */
export const viewsBuilt = () => ({ type: MSG.VIEWS_BUILT });

/** The start-up failed: the SiteError's fields, the packages installed, the URLs fetched, the paths taken. */
export const error = ({ what, detail, stage }, loaded, fetched, paths) =>
  ({ type: MSG.ERROR, what, detail, stage, loaded, fetched, paths });

// ------------------------------------------------------------------------------- page <-> snapshot worker

export const makeSnapshot = (manifest) => ({ type: MSG.MAKE_SNAPSHOT, manifest });

export const snapshotMade = (bytes, ms) => ({ type: MSG.SNAPSHOT_MADE, bytes, ms });

// ------------------------------------------------------------------------------- page <-> learner's worker

/**
 * Starts a learner's worker: Python with NumPy, slm and lessons (manifest.learner_packages), no Panel. `files`: the
 * portable file's files, as 'start' has them.
 */
export const learnerStart = ({ manifest, root, fallbacks, files }) =>
  ({ type: MSG.LEARNER_START, manifest, root, fallbacks, files });

/** The learner's worker is ready to run code; `ms` since it began. */
export const learnerReady = (ms) => ({ type: MSG.LEARNER_READY, ms });

/**
 * Runs the learner's `code`, then `check` (null for a Run) in one fresh namespace (lessons.run_challenge); `model`:
 * the app's model as .npz bytes (an ArrayBuffer) for a `python check model`, else null. Answered with 'verdict'.
 */
export const learnerRun = (code, check, model) => ({ type: MSG.LEARNER_RUN, code, check, model });

/** What a run gave: lessons.Verdict.to_dict() ({status, message, stdout, line, passed}), and its time in ms. */
export const verdict = (result, ms) => ({ type: MSG.VERDICT, verdict: result, ms });

// -------------------------------------------------------------------------------- page <-> service worker

/** Store these URLs (what the visit fetched before the service worker controlled it); answered with 'kept'. */
export const keep = (urls) => ({ type: MSG.KEEP, urls });

export const kept = () => ({ type: MSG.KEPT });
