// Page side: progress screen, BokehJS, the worker, and the page half of Panel's pyodide-worker protocol
// (adapted from panel/_templates/pyodide_handler.js). `document.body` gets data-ready="1" once the app is
// interactive (data-error="1" when it failed); `window.siteInfo` holds stage end times (ms since navigation
// start), the packages the worker installed and the wasm heap size, for the tests and the benchmark.
// `data-snapshot` says whether the worker started from this build's memory snapshot ("restored") or, after a
// start without one, how making it for the next visit went ("saving", "saved", "failed"); `?snapshot=0`
// neither uses nor makes one.

let STAGES = []; // the loading stages, in order: the manifest's `site.stages` (build.py)
const body = document.body;
const query = new URLSearchParams(location.search);
// A stage that shows no progress for this long stops on the error panel (the stage, what was last seen, Retry)
// instead of a bar that never moves. `?stall=SECONDS` sets it (the tests use a short one).
const STALL_MS = 1000 * (Number(query.get("stall")) || 45);
const embed = body.dataset.embed === "1" || query.get("embed") === "1";
// Where the site's files come from. The hosted site: the server, next to this page. The portable file (one HTML
// file opened from disk, portable.js): the page itself, whose one JSON block indexes the files it embeds. A page
// with an opaque origin (the portable file; embed.html in an iframe sandboxed without allow-same-origin) may not
// start a worker from a URL, nor use Cache Storage or a service worker: it starts the worker from a blob.
const portable = portableIndex();
const opaque = self.origin === "null";
const useSnapshot = !opaque && query.get("snapshot") !== "0" && "caches" in self;
const serviceWorkers = !opaque && "serviceWorker" in navigator;
const info = (window.siteInfo = { timings: {}, loadedPackages: [], heapBytes: null });
const timings = info.timings;
const state = { stage: null, labels: {}, bytes: {}, total: {}, mainJsBytes: 0, failed: false, progress: "" };
let worker = null;
let stallTimer = null;

const $ = (sel) => document.querySelector(sel);
const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;

// ------------------------------------------------------------------------------------ error panel
// A failure the page shows: `what` names the asset or step (the error panel's heading), `detail` says why. The
// worker has a class of the same shape (worker.js), whose errors arrive as 'error' messages.
class SiteError extends Error {
  constructor(what, detail) {
    super(`${what}: ${detail}`);
    this.what = what;
    this.detail = detail;
  }
}

// `stopWorker` false: the worker reported the failure itself and has stopped; it may still be storing a download
// for the next visit (the decompressed wasm), which terminating it would cut off.
function fail(what, detail, stopWorker = true) {
  if (state.failed) return;
  state.failed = true;
  clearTimeout(stallTimer);
  if (worker && stopWorker) worker.terminate();
  $("#loading").hidden = true;
  $("#app").hidden = true;
  $("#error-what").textContent = what;
  $("#error-detail").textContent = detail || "";
  $("#error").hidden = false;
  body.dataset.error = "1";
  console.error(`[site] ${what}: ${detail}`);
}

function watchdog() {
  clearTimeout(stallTimer);
  stallTimer = setTimeout(() => {
    const label = state.labels[state.stage] || "Loading the page";
    const row = state.stage && $(`#stage-${state.stage} .bytes`)?.textContent;
    const seen = [row && `${label} ${row}`, $("#status").textContent].filter(Boolean).join("; ") || "nothing yet";
    fail(`Stalled: ${label}`, `No progress for ${STALL_MS / 1000} s. Last seen: ${seen}.`);
  }, STALL_MS);
}

// The watchdog restarts only on news: a message that repeats the last one's progress does not count.
function progressed(news) {
  if (news === state.progress) return;
  state.progress = news;
  watchdog();
}

// --------------------------------------------------------------------------------- progress screen
// One row per stage: its label, a progress bar and the bytes loaded.
function stageRows(stages) {
  STAGES = Object.keys(stages);
  state.labels = stages;
  $(".stages").replaceChildren(
    ...STAGES.map((s) => {
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
  for (const s of STAGES) {
    const row = $(`#stage-${s}`);
    const done = state.bytes[s] || 0;
    const total = Math.max(state.total[s] || 0, done);
    row.querySelector("progress").max = total || 1;
    row.querySelector("progress").value = done;
    row.querySelector(".bytes").textContent = total ? `${mb(done)} / ${mb(total)}` : "";
    const idx = STAGES.indexOf(state.stage);
    row.dataset.state = STAGES.indexOf(s) < idx ? "done" : s === state.stage ? "active" : "waiting";
  }
}

// Ten times a second, not every frame: each repaint is CPU the worker needs while the page loads.
function tick() {
  if (body.dataset.ready || state.failed) return;
  $("#elapsed").textContent = `${(performance.now() / 1000).toFixed(1)} s`;
  setTimeout(tick, 100);
}

// ------------------------------------------------------------------------------------------ assets
async function fetchManifest() {
  if (portable) return portable.manifest;
  let resp;
  try {
    // no-store: a revalidation sends the cached copy's date, and a host answers 304 to a rolled-back build whose
    // files are older than it, which would keep the newer build running.
    resp = await fetch("build/manifest.json", { cache: "no-store" });
  } catch (e) {
    throw new SiteError(`Site manifest (build/manifest.json)`, `network error: ${e.message}`);
  }
  if (!resp.ok) throw new SiteError(`Site manifest (build/manifest.json)`, `HTTP ${resp.status} — was \`python build.py\` run?`);
  return resp.json();
}

// ---------------------------------------------------------------------------------- portable file
function portableIndex() {
  const el = document.querySelector('script[type="application/json"]');
  return el ? JSON.parse(el.textContent) : null;
}

function fromBase64(text) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

async function sha256Hex(bytes) {
  return [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

const MIME = { wasm: "application/wasm", js: "text/javascript", mjs: "text/javascript", css: "text/css",
  json: "application/json", svg: "image/svg+xml" };
const embedded = new Map(); // path -> Promise<Blob>

// An embedded file as a Blob, once its sha256 matches the index (as Pyodide checks the hosted site's
// downloads against its lock file); a damaged copy stops the page with the file's name.
function embeddedFile(path) {
  if (!embedded.has(path)) {
    embedded.set(path, (async () => {
      const part = portable.parts.find((p) => p.path === path);
      if (!part) throw new SiteError(`Portable file: ${path}`, "not in this file");
      let bytes = fromBase64(document.getElementById(part.id).textContent);
      if (part.encoding === "gzip") {
        const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
        bytes = new Uint8Array(await new Response(stream).arrayBuffer());
      }
      if (bytes.length !== part.size || (await sha256Hex(bytes)) !== part.sha256) {
        throw new SiteError(`Portable file: ${path}`, "the embedded copy is damaged (its sha256 does not match)");
      }
      return new Blob([bytes], { type: MIME[path.split(".").pop()] || "application/octet-stream" });
    })());
  }
  return embedded.get(path);
}

// What the worker fetches in the portable file: everything but what this page itself uses, as path -> {bytes, type}
// with the ArrayBuffers to transfer. Not as Blobs: a worker cannot read the Blobs its file:// page posts it in WebKit
// (WebKitGTK 2.50: every read of them fails with NotReadableError).
async function workerFiles() {
  const own = (path) => path.startsWith("build/vendor/") || ["loader.js", "worker.js", "style.css"].includes(path);
  const paths = portable.parts.map((p) => p.path).filter((path) => !own(path));
  const files = await Promise.all(paths.map(async (path) => {
    const blob = await embeddedFile(path);
    return { bytes: await blob.arrayBuffer(), type: blob.type };
  }));
  return [Object.fromEntries(paths.map((path, i) => [path, files[i]])), files.map((f) => f.bytes)];
}

// The stylesheets the document names by URL (Panel's, under manifest.panel_cdn_root, and the app's,
// manifest.app_stylesheet): in the portable file those URLs are rewritten to blob: URLs of the embedded copies
// (docsJson and every patch).
let vendorUrls = null;

async function portableStylesheets(manifest) {
  const prefix = manifest.panel_cdn_root.replace(/^\.\//, "");
  const app = manifest.app_stylesheet.replace(/^\.\//, "");
  const paths = portable.parts.map((p) => p.path)
    .filter((p) => (p.startsWith(prefix) && !p.endsWith(".js")) || p === app);
  const blobs = await Promise.all(paths.map(embeddedFile));
  vendorUrls = new Map(paths.map((path, i) => [`./${path}`, URL.createObjectURL(blobs[i])]));
}

function localUrls(text) {
  return vendorUrls ? text.replace(/\.\/build\/[\w./-]+/g, (url) => vendorUrls.get(url) || url) : text;
}

// ----------------------------------------------------------------------------------- service worker
// The service worker keeps every asset for the next visit (and offline). A first visit does not wait for it
// (registering it and routing every download through it costs the start-up CPU): once the app is ready or has
// failed, keepForNextVisit() registers it and hands it what the visit fetched (sw.js). A page still controlled
// by another build's service worker waits (briefly) until this build's takes over: the old one's cache-first
// answers would be stale.
const thisBuilds = (buildId) =>
  serviceWorkers && navigator.serviceWorker.controller?.scriptURL.endsWith(`build=${buildId}`);

async function replaceOtherBuildsServiceWorker(buildId) {
  if (!serviceWorkers || !navigator.serviceWorker.controller || thisBuilds(buildId)) return false;
  try {
    await navigator.serviceWorker.register(`sw.js?build=${buildId}`);
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, 3000);
      navigator.serviceWorker.addEventListener("controllerchange", () => {
        if (thisBuilds(buildId)) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  } catch (e) {
    console.warn("[site] service worker not available:", e);
  }
  return true;
}

// Resolves when `promise` does, or after `ms` with "timeout": a stuck service worker must not hold up the snapshot.
const within = (ms, promise) => Promise.race([promise, new Promise((r) => setTimeout(() => r("timeout"), ms))]);

async function keepForNextVisit(buildId, fetchedByWorker) {
  if (!serviceWorkers) return;
  try {
    const registration = await navigator.serviceWorker.register(`sw.js?build=${buildId}`);
    if (thisBuilds(buildId)) return; // it controlled this visit: everything passed through it
    const sw = registration.installing || registration.waiting || registration.active;
    const settled = () => sw.state === "activated" || sw.state === "redundant";
    if (!settled()) {
      await within(30000, new Promise((resolve) => sw.addEventListener("statechange", () => settled() && resolve())));
    }
    if (sw.state !== "activated") return; // its install failed or stalled: the next visit tries again
    const urls = [location.href, ...performance.getEntriesByType("resource").map((e) => e.name), ...fetchedByWorker];
    const channel = new MessageChannel();
    const kept = new Promise((resolve) => (channel.port1.onmessage = resolve));
    sw.postMessage({ type: "keep", urls }, [channel.port2]);
    if ((await within(60000, kept)) === "timeout") console.warn("[site] the service worker did not confirm storing");
  } catch (e) {
    console.warn("[site] service worker not available:", e);
  }
}

// Downloads these scripts without running them (the scripts that name them later get the same bytes); resolves once
// every one has loaded or failed (its <script> then reports the failure).
function preload(paths) {
  return Promise.all(paths.map((path) => new Promise((resolve) => {
    const link = document.createElement("link");
    link.rel = "preload";
    link.as = "script";
    link.href = path;
    link.onload = link.onerror = resolve;
    document.head.appendChild(link);
  })));
}

// Resolves once each of these files has arrived (its resource timing entry is there). A preload's load event can
// come much later: Chromium fires it once the script is compiled as well (~0.2 s after its last byte on 2 cores).
function arrived(paths) {
  const pending = new Set(paths.map((p) => new URL(p, location.href).href));
  return new Promise((resolve) => {
    const observer = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) pending.delete(entry.name);
      if (pending.size) return;
      observer.disconnect();
      resolve();
    });
    observer.observe({ type: "resource", buffered: true });
  });
}

// BokehJS and Panel's JS, in order (async=false keeps the order while downloading in parallel).
async function loadMainJs(manifest) {
  const urls = portable
    ? await Promise.all(manifest.site.main_js.map(async (src) => URL.createObjectURL(await embeddedFile(src))))
    : manifest.site.main_js;
  return Promise.all(
    manifest.site.main_js.map(
      (src, i) =>
        new Promise((resolve, reject) => {
          const el = document.createElement("script");
          el.src = urls[i];
          el.async = false;
          el.onload = () => {
            state.mainJsBytes += manifest.files[src]?.size || 0;
            resolve();
          };
          el.onerror = () => reject(new SiteError(`Browser library (${src})`, "failed to load"));
          document.head.appendChild(el);
        }),
    ),
  );
}

// ---------------------------------------------------------------------------- Panel worker protocol
// Started once the manifest is in (and, with a first view, its bytes). A page with an opaque origin makes it from
// a blob of worker.js's text, as a classic worker (there a module worker from a URL or a blob is refused), and
// tells it the site's root with 'start'.
function spawnWorker() {
  if (!opaque) return watchWorker(new Worker("worker.js", { type: "module" }));
  return workerSource().then((source) => watchWorker(new Worker(URL.createObjectURL(source))));
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
    throw new SiteError("Loading the worker (worker.js)", `${e.message || e} (a page in a sandboxed iframe reads the site's files with CORS: the host must send Access-Control-Allow-Origin)`);
  }
}

function watchWorker(w) {
  w.onerror = (e) => fail("The Python worker crashed", e.message || "worker error");
  w.onmessageerror = () => fail("The Python worker crashed", "a message could not be decoded");
  return w;
}

async function startWorker(manifest, mainJs, hold) {
  const totals = Object.fromEntries(STAGES.map((s) => [s, 0]));
  // What this page and the worker download: Pyodide, wheels, BokehJS/Panel JS (Panel's CSS files, fetched by
  // BokehJS as the views need them, are not counted). A gzip copy counts as its file (the worker reports the
  // difference when it downloads the copy).
  const copies = Object.values(manifest.gzip_copies);
  for (const [path, f] of Object.entries(manifest.files)) {
    const vendor = path.startsWith("build/vendor/");
    const loaded = !manifest.site.not_loaded.includes(path) && !copies.includes(path);
    if (path.startsWith("build/") && loaded && (!vendor || manifest.site.main_js.includes(path))) {
      totals[f.stage] += f.size;
    }
  }
  worker.busy = false;
  worker.queue = [];
  let jsdoc = null;
  let patching = 0;

  const sendChange = (event) => {
    if ((event.setter_id != null && event.setter_id === "py") || patching > 0) return;
    if (worker.busy) {
      // Held until the worker is idle, in order: a Generate click must not overtake the prompt typed just before
      // it. A property change replaces an older change of the same property, unless a click or another event
      // stands between them.
      if (event.model && event.attr) {
        const barrier = worker.queue.findLastIndex((e) => !(e.model && e.attr)) + 1;
        const same = (e) => e.model === event.model && e.attr === event.attr;
        worker.queue = [...worker.queue.slice(0, barrier), ...worker.queue.slice(barrier).filter((e) => !same(e))];
      }
      worker.queue.push(event);
      return;
    }
    worker.busy = true;
    body.dataset.worker = "busy"; // until 'idle' with nothing held: tests wait for the answer to a click
    worker.postMessage({ type: "patch", patch: jsdoc.create_json_patch([event]) });
  };

  worker.onmessage = async (event) => {
    const msg = event.data;
    progressed(JSON.stringify([msg.type, msg.bytes, msg.stage, msg.msg]));
    if (msg.type === "progress") {
      for (const s of STAGES) {
        state.bytes[s] = msg.bytes[s] + (s === "runtime" ? state.mainJsBytes : 0);
        state.total[s] = totals[s] + msg.extraTotal[s];
      }
      render();
    } else if (msg.type === "stage") {
      if (state.stage) timings[state.stage] = performance.now();
      state.stage = msg.stage;
      render();
    } else if (msg.type === "status") {
      $("#status").textContent = msg.msg;
    } else if (msg.type === "error") {
      info.loadedPackages = msg.loaded || [];
      fail(msg.what, msg.detail, false);
      keepForNextVisit(manifest.build_id, msg.fetched || []); // an offline visit then gets as far
    } else if (msg.type === "render") {
      $("#status").textContent = "Rendering";
      timings.app = performance.now();
      info.worker = msg.timings;
      info.snapshot = msg.snapshot;
      try {
        await mainJs;
      } catch (e) {
        fail(e.what || "Loading the page", e.detail || String(e));
        return;
      }
      try {
        jsdoc = await embedDocument(msg);
      } catch (e) {
        fail("Rendering the app (BokehJS)", String(e.stack || e));
        return;
      }
      jsdoc.on_change(sendChange, false);
      $("#app").inert = false;
      $("#app").removeAttribute("aria-busy");
      timings.render = performance.now();
      worker.postMessage({ type: "rendered" });
      worker.postMessage({ type: "location", location: pageLocation() });
    } else if (msg.type === "ready") {
      clearTimeout(stallTimer);
      timings.ready = performance.now();
      info.heapBytes = msg.heapBytes;
      info.loadedPackages = msg.loaded;
      $("#loading").hidden = true;
      body.dataset.ready = "1";
      drops.ready(worker);
      offerOfflineCopy(manifest);
      const kept = keepForNextVisit(manifest.build_id, msg.fetched);
      if (useSnapshot) {
        if (info.snapshot === "restored") body.dataset.snapshot = "restored";
        else saveSnapshot(manifest, kept);
      }
    } else if (msg.type === "views-built") {
      body.dataset.views = "built";
    } else if (msg.type === "idle") {
      if (worker.queue.length) {
        const patch = jsdoc.create_json_patch(worker.queue);
        worker.queue = [];
        worker.postMessage({ type: "patch", patch });
      } else {
        worker.busy = false;
        body.dataset.worker = "idle";
      }
    } else if (msg.type === "patch") {
      const patch = !vendorUrls ? msg.patch
        : typeof msg.patch === "string" ? localUrls(msg.patch) : JSON.parse(localUrls(JSON.stringify(msg.patch)));
      try {
        patching += 1;
        jsdoc.apply_json_patch(patch, msg.buffers);
      } finally {
        patching -= 1;
      }
    }
  };
  // No service worker controls a first visit: the worker stores its downloads itself (worker.js `keepIn`).
  const keep = serviceWorkers && "caches" in self && !thisBuilds(manifest.build_id);
  // A page a service worker serves gets the wheels from its cache: the worker downloads them without a thread.
  const controlled = Boolean(serviceWorkers && navigator.serviceWorker.controller);
  // A worker made from a blob learns the site's root here, and in the portable file gets the files themselves.
  const root = new URL("./", location.href).href;
  const [files, transfer] = portable ? await workerFiles() : [null, []];
  const models = portable ? await portableModels() : null;
  worker.postMessage(
    { type: "start", manifest, location: pageLocation(), snapshot: useSnapshot, keep, controlled, root, files, hold, models },
    [...transfer, ...(models || []).map((m) => m.data)],
  );
}

// "Save for offline use" (the full page on the hosted site): the portable file, assembled by portable.js from the
// files this visit loaded (the service worker's cache answers; NumPy too, wherever it came from).
function offerOfflineCopy(manifest) {
  const footer = $("#offline");
  if (!footer || portable || opaque || embed) return;
  footer.hidden = false;
  const button = $("#save-offline");
  const status = $("#save-offline-status");
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "Putting the playground into one file…";
    try {
      const { assemble } = await import("./portable.js");
      const read = async (url) => {
        const resp = await fetch(url);
        if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
        return new Uint8Array(await resp.arrayBuffer());
      };
      const models = await storedModels();
      const file = new Blob([await assemble({ manifest, read, models })], { type: "text/html" });
      const link = document.createElement("a");
      link.href = URL.createObjectURL(file);
      link.download = manifest.site.portable_name;
      link.click();
      status.textContent = `Saved ${manifest.site.portable_name} (${mb(file.size)}): open it from a folder or a USB stick, no network needed.`;
    } catch (e) {
      status.textContent = `Could not save it: ${e.message || e}`;
    } finally {
      button.disabled = false;
    }
  });
}

// The models in the worker's store (slmStore), with their bytes: the portable file embeds them.
function storedModels() {
  const channel = new MessageChannel();
  const answer = new Promise((resolve) => (channel.port1.onmessage = (event) => resolve(event.data)));
  worker.postMessage({ type: "export-models" }, [channel.port2]);
  return answer;
}

// The models the portable file embeds ([{key, name, bytes, saved, data: ArrayBuffer}], checked like its files),
// for the worker's slmStore.
async function portableModels() {
  return Promise.all((portable.models || []).map(async (m) => {
    const data = fromBase64(document.getElementById(m.id).textContent);
    if (data.length !== m.bytes || (await sha256Hex(data)) !== m.sha256) {
      throw new SiteError(`Portable file: the model ${m.name}`, "the embedded copy is damaged (its sha256 does not match)");
    }
    return { key: m.key, name: m.name, bytes: m.bytes, saved: m.saved, data: data.buffer };
  }));
}

// The next visit starts from a memory snapshot of this one's interpreter (site/snapshot.js): made by a second
// worker, so the app stays as it is; a failure only costs the next visit its head start. It starts once the
// service worker has what this visit fetched (`kept`): its own downloads are then served from there.
async function saveSnapshot(manifest, kept) {
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
  maker.onmessage = (event) => {
    const msg = event.data;
    if (msg.type === "snapshot") done("saved", { bytes: msg.bytes, ms: msg.ms });
    else if (msg.type === "error") done("failed", `${msg.what}: ${msg.detail}`);
  };
  maker.postMessage({ type: "snapshot", manifest });
}

// The page's location for pn.state.location (the worker's own location is worker.js).
function pageLocation() {
  const loc = JSON.parse(JSON.stringify(window.location));
  if (embed) {
    const params = new URLSearchParams(loc.search);
    params.set("embed", "1");
    loc.search = `?${params}`;
  }
  return JSON.stringify(loc);
}

const shown = new Map(); // box in #app -> its BokehJS views and document (embedDocument)

// Renders a document (Panel's 'render' message, or the build's first view in the same form) into a new box in
// #app; its BokehJS document. The live app is drawn invisibly over the first view (same place, same width) and
// replaces it once drawn: the layout does not move.
async function embedDocument(msg, prefix = "app") {
  const docsJson = JSON.parse(localUrls(msg.docs_json));
  const renderItems = JSON.parse(msg.render_items);
  const rootIds = JSON.parse(msg.root_ids);
  const app = $("#app");
  const box = document.createElement("div");
  box.className = "app-box";
  const earlier = [...app.children];
  if (earlier.length) box.classList.add("app-box-drawing");
  const roots = {};
  rootIds.forEach((id, i) => {
    const el = document.createElement("div");
    el.id = `${prefix}-root-${i}`;
    box.appendChild(el);
    roots[id] = el.id;
  });
  app.appendChild(box);
  renderItems[0].roots = roots;
  renderItems[0].root_ids = rootIds;
  app.hidden = false;
  const [views] = await window.Bokeh.embed.embed_items(docsJson, renderItems);
  const doc = [...views.roots.values()][0].model.document;
  shown.set(box, { views, doc });
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))); // laid out
  for (const el of earlier) {
    // The first view's document goes with its box: Bokeh.documents then holds the live one alone.
    const old = shown.get(el);
    if (old) {
      for (const view of old.views.roots.values()) view.remove();
      const i = window.Bokeh.documents.indexOf(old.doc);
      if (i >= 0) window.Bokeh.documents.splice(i, 1);
    }
    el.remove();
  }
  box.classList.remove("app-box-drawing");
  return doc;
}

// ------------------------------------------------------------------------------------- first view
// The build's pre-rendered first view (sitebuild/first_view.py): the default state's page, shown with BokehJS
// alone while Python starts — only when the URL sets none of the app's state parameters, so that it never shows
// numbers for another prompt than the one in the URL. Inert and marked as starting; the live app replaces it.
const firstViewWanted = (manifest) =>
  Boolean(manifest.first_view) && !embed && !portable && !manifest.first_view.state_params.some((p) => query.has(p));

async function fetchFirstView(manifest) {
  const resp = await fetch(manifest.first_view.path);
  if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
  return resp.json();
}

async function showFirstView(firstView, mainJs) {
  try {
    const [msg] = await Promise.all([firstView, mainJs]);
    if (body.dataset.ready || state.failed || $("#app").children.length) return; // the live app came first
    body.dataset.firstView = "shown";
    const app = $("#app");
    app.inert = true; // a picture of the app until it is live: nothing to focus or press
    app.setAttribute("aria-busy", "true");
    await embedDocument(msg, "first-view");
    timings.firstView = performance.now();
  } catch (e) {
    console.warn("[site] no first view:", e); // the live app still comes; only the head start is lost
    delete body.dataset.firstView;
  }
}

// ------------------------------------------------------------------------------------- dropped files
// Files dropped anywhere on the page (several files, a folder, a .zip or .npz) go to the app's Python
// (worker.js -> boot.py deliver_files -> playground.inbox.deliver) as [relative path, bytes]. A drop before the app
// is ready is held until then. body[data-drop="over"] highlights the page while files are dragged over it.
const drops = dropTarget();

function dropTarget() {
  let target = null; // the worker, once the app is ready
  let held = [];
  let depth = 0; // dragenter/dragleave pairs: they fire for every child element crossed
  const send = (files) => target.postMessage({ type: "files", files }, files.map(([, buffer]) => buffer));
  const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
  const highlight = (on) => (on ? (body.dataset.drop = "over") : delete body.dataset.drop);
  document.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    depth += 1;
    highlight(true);
  });
  document.addEventListener("dragleave", (event) => {
    if (!carriesFiles(event)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) highlight(false);
  });
  document.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault(); // else the browser opens the file instead of dropping it here
    event.dataTransfer.dropEffect = "copy";
    highlight(true);
  });
  document.addEventListener("drop", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth = 0;
    highlight(false);
    // The entries must be taken now: the DataTransfer is emptied once this handler returns.
    const items = [...event.dataTransfer.items].filter((item) => item.kind === "file");
    const entries = items.map((item) => item.webkitGetAsEntry?.() || null);
    const plain = [...event.dataTransfer.files];
    readDropped(entries, plain).then((files) => {
      if (!files.length) return;
      if (target) send(files);
      else {
        held.push(...files);
        console.info(`[site] ${files.length} dropped file(s) held until the app has started`);
      }
    }, (e) => console.error("[site] the dropped files could not be read:", e));
  });
  return {
    ready(worker) {
      target = worker;
      if (held.length) send(held);
      held = [];
    },
  };
}

// [[relative path, ArrayBuffer], ...] of a drop: a folder's files under their path inside it. `entries` (one per
// dropped item, null where the engine gives none) are walked; without them, the plain list of files.
async function readDropped(entries, plain) {
  const files = [];
  if (entries.length && entries.every(Boolean)) {
    // A dropped folder's files are named by their path inside it.
    for (const entry of entries) await walkEntry(entry, files, entry.isDirectory ? `${entry.fullPath}/` : "/");
  } else {
    for (const file of plain) files.push([file.webkitRelativePath || file.name, await file.arrayBuffer()]);
  }
  return files;
}

async function walkEntry(entry, files, base) {
  if (entry.isFile) {
    const path = entry.fullPath.startsWith(base) ? entry.fullPath.slice(base.length) : entry.name;
    const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
    files.push([path, await file.arrayBuffer()]);
    return;
  }
  const reader = entry.createReader();
  for (;;) {
    // readEntries gives a folder's entries in batches (100 in Chromium) until it gives none.
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (!batch.length) break;
    for (const child of batch) await walkEntry(child, files, base);
  }
}

// ------------------------------------------------------------------------------------------- main
async function main() {
  $("#retry").addEventListener("click", () => location.reload());
  tick();
  watchdog();
  // A page no service worker controls (a first visit, the portable file) starts the worker at once, so that its
  // script has run by the time the manifest is in. A controlled page starts it once this build's service worker is
  // in charge: another build's would serve that build's worker.js.
  const early = serviceWorkers && navigator.serviceWorker.controller ? null : Promise.resolve().then(spawnWorker);
  early?.then((w) => (worker = w), () => {}); // a failure is reported where it is awaited
  try {
    const manifest = await fetchManifest();
    timings.manifest = performance.now();
    info.build = manifest.build_id;
    stageRows(manifest.site.stages);
    await replaceOtherBuildsServiceWorker(manifest.build_id);
    timings.serviceWorker = performance.now();
    if (portable) await portableStylesheets(manifest);
    // Not on a visit this build's service worker serves from its cache: that one is ready in about a second, and
    // drawing the first view meanwhile made it ~0.2 s later (measured: 1.47 vs 1.29 s, medians of 6 reloads).
    const withFirstView = firstViewWanted(manifest) && !thisBuilds(manifest.build_id);
    let firstView = null;
    let firstBytes = null;
    if (withFirstView) {
      // The first view's bytes (BokehJS, Panel's JS, the document) before the runtime's: on a slow link they
      // would otherwise share it with the 8.6 MB of wasm. Downloaded, not yet run (below); the worker starts its
      // downloads of the runtime when they are in ('go').
      firstView = fetchFirstView(manifest);
      const files = [...manifest.site.main_js, manifest.first_view.path];
      firstBytes = Promise.race([arrived(files), Promise.allSettled([preload(manifest.site.main_js), firstView])]);
    }
    worker = await (early || spawnWorker());
    // BokehJS keeps this thread busy for about half a second: it runs once the worker has begun (its first message;
    // Chromium runs a new worker's script only when this thread is free) and once 'go' is sent, which it would
    // otherwise hold up for that long.
    const running = new Promise((resolve) => worker.addEventListener("message", resolve, { once: true }));
    const released = firstBytes?.then(() => worker.postMessage({ type: "go" }));
    const mainJs = Promise.all([running, released]).then(() => loadMainJs(manifest));
    mainJs.catch((e) => fail(e.what || "Loading the page", e.detail || String(e)));
    if (withFirstView) showFirstView(firstView, mainJs);
    await startWorker(manifest, mainJs, withFirstView);
  } catch (e) {
    if (e instanceof SiteError) fail(e.what, e.detail);
    else fail("Loading the page", String(e.stack || e));
  }
}

main();
