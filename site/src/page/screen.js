// The loading screen: one row per start-up stage (its label, a bar, the bytes), the elapsed time, the watchdog,
// and the error panel, which every failure ends on (what failed, the detail, the stage; Retry).
import { $, body, info, mb, query } from "./env.js";

// A stage that shows no progress for this long stops on the error panel (the stage, what was last seen, Retry)
// instead of a bar that never moves. `?stall=SECONDS` sets it (the tests use a short one).
const STALL_MS = 1000 * (Number(query.get("stall")) || 45);

const state = { stages: [], stage: null, labels: {}, bytes: {}, total: {}, waiting: [], mainJsBytes: 0, failed: false,
  progress: "" };
let stallTimer = null;
let worker = null; // terminated by a failure it did not report itself

export const failed = () => state.failed;
export const labels = () => state.labels;

/** The worker a failure stops. */
export function attach(w) {
  worker = w;
}

/**
 * Shows the error panel. `stopWorker` false: the worker reported the failure itself and has stopped; it may still
 * be storing a download for the next visit (the decompressed wasm), which terminating it would cut off.
 */
export function fail({ what, detail, stage = null }, stopWorker = true) {
  if (state.failed) return;
  state.failed = true;
  clearTimeout(stallTimer);
  if (worker && stopWorker) worker.terminate();
  $("#loading").hidden = true;
  $("#app").hidden = true;
  $("#error-what").textContent = what;
  $("#error-detail").textContent = detail || "";
  const key = stage || state.stage;
  // The stage by its label on the progress screen (the worker's three), else as the page names its own.
  const stageEl = $("#error-stage");
  if (stageEl) stageEl.textContent = key ? `Stage: ${state.labels[key] || key}` : "";
  $("#error").hidden = false;
  body.dataset.error = "1";
  body.dataset.errorStage = key || "page";
  console.error(`[site] ${what}: ${detail}`);
}

/** (Re)starts the watchdog. */
export function watchdog() {
  clearTimeout(stallTimer);
  stallTimer = setTimeout(() => {
    const label = state.labels[state.stage] || "Loading the page";
    const row = state.stage && $(`#stage-${state.stage} .bytes`)?.textContent;
    const seen = [row && `${label} ${row}`, $("#status").textContent].filter(Boolean).join("; ") || "nothing yet";
    const names = state.waiting.length > 4 ? [...state.waiting.slice(0, 3), `${state.waiting.length - 3} more files`]
      : state.waiting;
    const waiting = names.length ? ` Still waiting for: ${names.join(", ")}.` : "";
    fail({ what: `Stalled: ${label}`, detail: `No progress for ${STALL_MS / 1000} s. Last seen: ${seen}.${waiting}`,
      stage: state.stage });
  }, STALL_MS);
}

export const stopWatchdog = () => clearTimeout(stallTimer);

/** The watchdog restarts only on news: a message that repeats the last one's progress does not count. */
export function progressed(news) {
  // Once the app is ready its messages carry the learner's work (a training run's charts): nothing to time, and a
  // pause in them (the run ended) is no stall.
  if (body.dataset.ready === "1") return;
  if (news === state.progress) return;
  state.progress = news;
  watchdog();
}

/**
 * One row per stage (the manifest's site.stages: key -> label). Each stage's total: what this page and the worker
 * download (Pyodide, wheels, BokehJS and Panel's JS; not Panel's CSS files, which BokehJS fetches as the views need
 * them). A gzip copy counts as its file (the worker reports the difference when it downloads the copy).
 */
export function stageRows(manifest) {
  const stages = manifest.site.stages;
  state.stages = Object.keys(stages);
  state.labels = stages;
  state.totals = Object.fromEntries(state.stages.map((s) => [s, 0]));
  const copies = Object.values(manifest.site.gzip_copies);
  for (const [path, f] of Object.entries(manifest.files)) {
    const vendor = path.startsWith("build/vendor/");
    const loaded = !manifest.site.not_loaded.includes(path) && !copies.includes(path);
    if (path.startsWith("build/") && loaded && (!vendor || manifest.site.main_js.includes(path))) {
      state.totals[f.stage] += f.size;
    }
  }
  $(".stages").replaceChildren(
    ...state.stages.map((s) => {
      const row = document.createElement("li");
      row.id = `stage-${s}`;
      row.dataset.state = "waiting";
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = stages[s];
      const bar = document.createElement("progress");
      bar.value = 0;
      bar.max = 1;
      bar.setAttribute("aria-label", stages[s]);
      const size = document.createElement("span");
      size.className = "bytes";
      row.append(name, bar, size);
      return row;
    }),
  );
}

function render() {
  const idx = state.stages.indexOf(state.stage);
  for (const s of state.stages) {
    const row = $(`#stage-${s}`);
    const done = state.bytes[s] || 0;
    const total = Math.max(state.total[s] || 0, done);
    row.querySelector("progress").max = total || 1;
    row.querySelector("progress").value = done;
    row.querySelector(".bytes").textContent = total ? `${mb(done)} / ${mb(total)}` : "";
    row.dataset.state = state.stages.indexOf(s) < idx ? "done" : s === state.stage ? "active" : "waiting";
  }
}

/** The worker's byte counts (its 'progress'), with the page's own scripts counted in the runtime's row. */
export function showProgress(bytes, extraTotal, waiting) {
  state.waiting = waiting;
  for (const s of state.stages) {
    state.bytes[s] = bytes[s] + (s === "runtime" ? state.mainJsBytes : 0);
    state.total[s] = state.totals[s] + extraTotal[s];
  }
  render();
}

/** A stage began (the worker's 'stage'): the one before it ends now. */
export function showStage(stage) {
  if (state.stage) info.timings[state.stage] = performance.now();
  state.stage = stage;
  render();
}

export function addMainJsBytes(n) {
  state.mainJsBytes += n;
}

/** Ten times a second, not every frame: each repaint is CPU the worker needs while the page loads. */
export function tick() {
  if (body.dataset.ready || state.failed) return;
  $("#elapsed").textContent = `${(performance.now() / 1000).toFixed(1)} s`;
  setTimeout(tick, 100);
}
