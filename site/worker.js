// Runs Pyodide and the Panel app off the main thread, so the page never freezes.
//
// Protocol: Panel's pyodide-worker protocol (what `panel convert --to pyodide-worker` generates, see
// panel/_templates/pyodide_worker.js): worker -> page 'status', 'render', 'patch', 'idle';
// page -> worker 'rendered', 'patch', 'location'. Added for the loader: page -> worker 'start';
// worker -> page 'progress', 'stage', 'ready', 'views-built', 'error'. A second instance of this worker, started by
// the page after 'ready' when no memory snapshot of this build exists yet, gets 'snapshot' and answers 'snapshot'
// (snapshot.js).

// The site root: worker.js sits next to index.html. A worker the page made from a blob (an opaque origin: the
// portable file, a sandboxed iframe) learns it from 'start', and in the portable file also gets the files: their bytes
// (ArrayBuffers: loader.js workerFiles says why not Blobs) and types, which the page has checked against their
// sha256, and which fetch() below serves instead of the network.
const fromBlob = self.location.protocol === "blob:";
let root = fromBlob ? null : new URL("./", self.location.href).href;
let embedded = null; // path -> {bytes: ArrayBuffer, type} (the portable file)
let manifest = null;
let pyodide = null;
let py = null; // the namespace boot.py ran in (apply_patch, link_docs, set_location, playground)

const post = (msg, transfer) => self.postMessage(msg, transfer || []);

// Panel's converter of Python dicts to JS objects for its patches (undefined values become null). Panel makes it by
// evaluating a string, which a worker made from a blob may not do: it runs under its page's CSP
// (py/sitebuild/patches/panel-1.9.4/0004 has Panel take this one).
self.panelDictConverter = (entries) => {
  for (const entry of entries) if (entry[1] === undefined) entry[1] = null;
  return Object.fromEntries(entries);
};
// What this worker downloaded, for the service worker to keep on a first visit (loader.js keepForNextVisit).
const fetchedInThread = []; // the wheels' download thread's (fetchInThread)
const fetched = () => [...performance.getEntriesByType("resource").map((e) => e.name), ...fetchedInThread];
const postError = (what, detail) =>
  post({ type: "error", what, detail, loaded: Object.keys(pyodide?.loadedPackages || {}), fetched: fetched() });

// An error the page shows verbatim: `what` names the asset or step that failed.
class SiteError extends Error {
  constructor(what, detail) {
    super(`${what}: ${detail}`);
    this.what = what;
    this.detail = detail;
  }
}

// ----------------------------------------------------------------------------------- byte counting
let bytes = null; // stage -> bytes downloaded (the stages are the manifest's `site.stages`)
let extraTotal = null; // stage -> sizes learnt from Content-Length (CDN files)
const failed = []; // [{url, reason}] every fetch that failed, to name it in the error panel
let progressTimer = null;

function stageOf(url) {
  const rel = url.startsWith(root) ? url.slice(root.length).split("?")[0] : null;
  if (rel && manifest.files[rel]) return manifest.files[rel].stage;
  for (const r of Object.values(manifest.remote)) if (r.url === url) return r.stage;
  return "runtime";
}

function knownSize(url) {
  const rel = url.startsWith(root) ? url.slice(root.length).split("?")[0] : null;
  return rel && manifest.files[rel] ? manifest.files[rel].size : null;
}

function reportProgress() {
  if (progressTimer) return;
  progressTimer = setTimeout(() => {
    progressTimer = null;
    post({ type: "progress", bytes: { ...bytes }, extraTotal: { ...extraTotal } });
  }, 100);
}

// A runtime file could not be downloaded: say so at once (Pyodide can hang on a missing wasm file). Package
// failures are reported when loadPackage returns, after it has installed everything else.
function assetFailed(url, reason) {
  failed.push({ url, reason });
  if (knownSize(url) !== null && stageOf(url) === "runtime") {
    postError(`${manifest.site.stages[stageOf(url)]}: could not download ${named(url)}`, `${url}: ${reason}`);
  }
}

// On a first visit no service worker stands between this worker and the network (loader.js registers it once
// the app is ready): the worker puts the runtime files it downloads into this build's cache itself, as the
// service worker would have (the page then hands the service worker everything else the visit fetched, which
// it stores from the browser's HTTP cache).
let keepIn = null; // Promise<Cache> while doing so

// Count bytes from a clone, and hand Pyodide the untouched response: a synthetic Response would lose
// its URL, and with it Chrome's compiled-wasm code cache (except for a gzip copy, below).
const realFetch = self.fetch.bind(self);
self.fetch = (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input), root).href;
  if (embedded && url.startsWith(root)) return fromMemory(url);
  const requested = early.get(url);
  if (requested) {
    early.delete(url);
    return requested;
  }
  return download(url, input, init);
};

async function download(url, input, init) {
  const copy = await gzipCopy(url);
  let resp;
  try {
    resp = await realFetch(copy || input, copy ? undefined : init);
  } catch (e) {
    assetFailed(copy || url, `network error (${e.message || e})`);
    throw e;
  }
  if (!resp.ok) {
    assetFailed(copy || url, `HTTP ${resp.status}`);
    return resp;
  }
  const stage = stageOf(url);
  const size = knownSize(url) ?? Number(resp.headers.get("content-length") || 0);
  if (knownSize(url) === null) extraTotal[stage] += size;
  if (init?.integrity) {
    // A package file (loadPackage checks each one's sha256): the promise resolves once the whole file is in, so
    // it is counted now, and the service worker keeps it after 'ready'. Copying its stream on this thread, to
    // count chunks and to store it, made the packages stage 0.06 s slower (10 alternating cold visits).
    bytes[stage] += size;
    reportProgress();
    return resp;
  }
  if (resp.body) {
    const reader = resp.clone().body.getReader();
    const counted = (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        bytes[stage] += value.byteLength;
        reportProgress();
      }
    })();
    counted.catch(() => {}); // a broken stream: the response's own reader (Pyodide's) reports it
    runtimeDownloads.get(url)?.(counted);
  }
  if (copy) {
    extraTotal[stage] += knownSize(copy) - size; // the page's total counts the file itself
    resp = await decompressed(resp);
    wasmFromCopy = true;
  }
  // A decompressed copy is kept under the file's own name whether or not this visit keeps its other downloads: a
  // later visit gets it from there, and Chromium its compiled code. (No Cache Storage with an opaque origin.)
  const ours = url.startsWith(root) || Object.values(manifest.remote).some((r) => r.url === url);
  const cache = copy && !keepIn && "caches" in self ? caches.open(buildCache) : ours && keepIn;
  if (cache) {
    const kept = resp.clone();
    cache.then((c) => c.put(url, kept)).catch(() => {}); // a miss only costs the next visit a download
  }
  return resp;
}

// ---------------------------------------------------------------------------------- gzip copies
// pyodide.asm.wasm is 8.6 MB and 2.8 MB gzipped, and not every static host compresses wasm: the build ships a gzip
// copy (manifest.gzip_copies). A visit downloads the copy unless this build's cache holds the file itself (a later
// visit, which then also gets Chromium's compiled code), or the engine cannot decompress a stream.
let buildCache = null; // this build's cache name (useManifest)

async function gzipCopy(url) {
  const path = url.startsWith(root) ? manifest.gzip_copies?.[url.slice(root.length)] : null;
  if (!path || !("DecompressionStream" in self)) return null;
  try {
    if ("caches" in self && (await caches.match(url, { cacheName: buildCache }))) return null;
  } catch {
    // Cache Storage refused (a private window)
  }
  return `${root}${path}`;
}

// ------------------------------------------------------------------------ the wasm's compiled code
// Chromium keeps a wasm module's compiled code beside the response it was compiled from, written once enough of it
// is optimized (V8 signals that: 1 MB of newly optimized code, or 2 s without any), and the next visit's compile of
// that response reads it instead of compiling each function again on its first call (~0.4 s of a warm start). A
// first visit's app worker compiles the gzip copy's stream, a Response without a URL: nothing can be written there.
// The snapshot worker compiles the cached wasm, whose code the next visit would read, but V8 hands it the module the
// app worker compiled (its in-process cache is keyed by the bytes and the compile options), and that module's code
// was optimized before the snapshot worker was there to be told: nothing was written either. So every compile but
// the copy's passes a compile option the module does not use (JS string builtins: it imports none): the snapshot
// worker then compiles its own module, which signals while that worker runs, and the next visit compiles with the
// same option, which its code must match. Engines without the option ignore it.
let wasmFromCopy = false; // set by download() before it hands over the copy's response
const instantiateStreaming = WebAssembly.instantiateStreaming;
WebAssembly.instantiateStreaming = async (source, imports) => {
  const response = await source; // Pyodide passes the promise of its fetch()
  try {
    return await instantiateStreaming(response, imports, wasmFromCopy ? undefined : { builtins: ["js-string"] });
  } catch (e) {
    // Pyodide only logs this and then waits forever: the page must hear of it.
    postError(`${manifest.site.stages.runtime}: could not compile the WebAssembly runtime`, String(e.message || e));
    throw e;
  }
};

// The file from its gzip copy, read whole and then inflated from memory. (Piping the network stream through the
// inflater corrupted it in Firefox ESR 140's module workers: "incorrect header check".) A host that sends the copy
// with Content-Encoding: gzip had the browser decompress it already.
async function decompressed(resp) {
  const type = { headers: { "Content-Type": "application/wasm" } };
  if (resp.headers.get("Content-Encoding")) return new Response(resp.body, type);
  const gz = new Blob([await resp.arrayBuffer()]);
  return new Response(await new Response(gz.stream().pipeThrough(new DecompressionStream("gzip"))).arrayBuffer(), type);
}

// -------------------------------------------------------------------------------- packages, early
// loadPackage asks for the wheels once the runtime has started, and on a slow link the link is idle until then
// (the runtime's last ~0.8 s, all CPU). So the wheels are requested as soon as the runtime's own downloads are in,
// with the URLs and integrity loadPackage will use: fetch above hands it these responses. They come in the order
// the app stage imports them (manifest.import_groups, sitebuild/assemble.py IMPORT_GROUPS), each group once the one
// before it is in: a group is installed and its module imported while the next one downloads. The "app" stage's
// wheels (the app's own, and the packages only the app's code may need: APP_STAGE_PACKAGES) come last: they are
// installed while prelude.py imports Panel, which does not need them.
const early = new Map(); // absolute URL -> Promise<Response>
const RUNTIME_DOWNLOADS = ["build/pyodide/pyodide.asm.wasm", "build/pyodide/python_stdlib.zip"];
const runtimeDownloads = new Map(); // absolute URL -> its resolve(the promise of its last byte)

function runtimeDownloaded() {
  const ended = (path) => new Promise((resolve) => runtimeDownloads.set(`${root}${path}`, resolve));
  return Promise.all(RUNTIME_DOWNLOADS.map(ended));
}

// The lock's sha256 (hex) as a fetch integrity value, as loadPackage writes it.
const integrity = (hex) => `sha256-${btoa(String.fromCharCode(...hex.match(/../g).map((b) => parseInt(b, 16))))}`;

const packageUrl = (entry) => new URL(entry.file_name, `${root}build/`).href;

// The manifest's packages in loading order: {groups: [the import groups' packages..., the packages stage's
// others], app: the "app" stage's}.
function packagesInOrder(lockPackages) {
  const grouped = manifest.import_groups.map((g) => g.packages);
  const app = [];
  const rest = [];
  for (const name of manifest.packages) {
    const entry = lockPackages[name];
    if (entry && stageOf(packageUrl(entry)) === "app") app.push(name);
    else if (!grouped.some((g) => g.includes(name))) rest.push(name);
  }
  return { groups: [...grouped, rest], app };
}

// Resolves to true when the download thread unpacks the wheels (installUnpacked installs them), false when
// loadPackage gets the responses requested here.
async function fetchPackagesEarly(lock, runtimeIn, thread) {
  const { packages } = await lock;
  const { groups, app } = packagesInOrder(packages);
  const order = [...groups, app].map((group) =>
    group.filter((name) => packages[name]).map((name) => ({ // a name not in the lock: loadPackage names it
      url: packageUrl(packages[name]),
      integrity: integrity(packages[name].sha256),
    })),
  );
  if (thread) {
    fetchInThread(order, runtimeIn);
    return true;
  }
  let after = runtimeIn;
  for (const group of order) {
    const requested = group.map(({ url, integrity }) => {
      const resp = after.then(() => download(url, url, { integrity }));
      resp.catch(() => {}); // loadPackage gets the failure
      early.set(url, resp);
      return resp;
    });
    if (requested.length) after = Promise.allSettled(requested); // a group of no packages waits for nothing
  }
  return false;
}

// The wheels' download thread (fetcher.js), which also unpacks them. This thread is busy for up to a second at a
// time while Python starts (one task, which nothing interrupts) and while it imports a group: a response that came in
// meanwhile waited, and so did the link once the browser's buffer for it was full; and Pyodide's loadPackage
// unpacked each wheel here, in Python (0.40-0.50 s of a cold start, ~950 files). fetcher.js downloads the wheels on a
// thread of its own, unpacks them there with the browser's inflater, and hands over each wheel's files, which this
// thread writes into site-packages (installUnpacked). Not in a worker made from a blob (an opaque origin may start
// no worker from a URL), nor where a worker cannot start one or cannot inflate a stream (there loadPackage installs
// the wheels this thread downloads, all at once), nor on a page a service worker serves (a nested worker's requests
// need not go through it: offline, they would fail). The thread is made at once but given the wheels to download
// only once the runtime's files are in (downloading beside them, it held up the runtime by ~0.1-0.2 s). Made then,
// it started only once Python was up, ~1 s later: Chromium loads a nested worker's script through its parent's
// thread, which Python's start keeps busy, and the link stood idle meanwhile. The page hands the service worker what
// the visit fetched (`fetched()`): the thread's downloads are listed with this worker's.
const unpacked = new Map(); // absolute URL -> Promise<[[path in the wheel, bytes], ...]>
// The thread, held until its last wheel is in: Firefox may end a nested worker whose Worker object was garbage
// collected while it unpacks (seen: the last groups never arrived when Python's failing import made garbage).
let downloadThread = null;

// fetcher.js inflates a wheel's members with DecompressionStream("deflate-raw") (Chromium 103, Firefox 113,
// Safari 16.4).
function inflatesRaw() {
  try {
    return Boolean(new DecompressionStream("deflate-raw"));
  } catch {
    return false; // the format is unknown here: loadPackage installs the wheels instead
  }
}

// Every wheel's promise is in `unpacked` when this returns (before its first await).
async function fetchInThread(order, runtimeIn) {
  const pending = new Map(); // url -> {resolve, reject}
  for (const { url } of order.flat()) {
    const files = new Promise((resolve, reject) => pending.set(url, { resolve, reject }));
    files.catch(() => {}); // its install reports the failure
    unpacked.set(url, files);
  }
  const failAll = (reason) => {
    for (const [url, { reject }] of pending) {
      assetFailed(url, reason);
      reject(new Error(reason));
    }
    pending.clear();
  };
  let thread;
  try {
    thread = new Worker(`${root}fetcher.js`);
  } catch (e) {
    failAll(`the download thread (fetcher.js) did not start: ${e.message || e}`);
    return;
  }
  downloadThread = thread;
  thread.onmessage = ({ data: { url, files, size, status, error } }) => {
    const { resolve, reject } = pending.get(url);
    pending.delete(url);
    if (!pending.size) downloadThread = null;
    if (error || status) {
      const reason = error || `HTTP ${status}`;
      assetFailed(url, reason);
      reject(new Error(reason));
    } else {
      bytes[stageOf(url)] += size;
      reportProgress();
      fetchedInThread.push(url);
      resolve(files);
    }
  };
  thread.onerror = (event) => {
    event.preventDefault();
    failAll("the download thread (fetcher.js) could not be loaded");
  };
  await runtimeIn;
  thread.postMessage(order);
}

const fetchLock = () => fetchText("build/pyodide-lock.json", manifest.site.stages.runtime).then(JSON.parse);

// The portable file: a file from the bytes the page sent, counted whole (reading a copy of its stream, as for a
// download, stalls WebKit's streaming wasm compile). The Response copies the bytes: a file can be served again.
async function fromMemory(url) {
  const file = embedded[url.slice(root.length).split("?")[0]];
  if (!file) {
    assetFailed(url, "not in the portable file");
    return new Response(null, { status: 404, statusText: "not in the portable file" });
  }
  bytes[stageOf(url)] += file.bytes.byteLength;
  reportProgress();
  return new Response(file.bytes, { headers: { "Content-Type": file.type } });
}


// ---------------------------------------------------------------------------------- the model store
// The models a learner trained or loaded, kept across visits in IndexedDB ("slm-models"), for the app's Python:
// `await js.slmStore.put(key, bytes, name)` (py/playground/storage.py). Two object stores, so that list() reads no
// model's bytes: "meta" ({key, name, bytes: size, saved: ms}) and "data" (key -> Uint8Array). Where IndexedDB is
// missing or refused (an opaque origin: the portable file, a sandboxed iframe; some private windows) available()
// is false and put() rejects with an Error that says so; list() and get() then answer from `embeddedModels`, the
// models the portable file was saved with ([{key, name, bytes, saved, data: Uint8Array}]).
const MODEL_DB = "slm-models";

function modelStore(embeddedModels = [], persistent = true) {
  let opening = null;
  const open = () => (opening ??= new Promise((resolve, reject) => {
    let request;
    try {
      if (!persistent) throw new Error("the portable file keeps no models but those it was saved with");
      request = indexedDB.open(MODEL_DB, 1);
    } catch (e) {
      reject(e); // no indexedDB at all, or an opaque origin (SecurityError)
      return;
    }
    request.onupgradeneeded = () => {
      request.result.createObjectStore("meta", { keyPath: "key" });
      request.result.createObjectStore("data");
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
    request.onblocked = () => reject(new Error("another tab holds an older version of the model store open"));
  }));
  const db = async () => {
    try {
      return await open();
    } catch (e) {
      throw new Error(`This page cannot keep models (no IndexedDB here: ${e?.message || e}). ` +
        "A page opened from a file, a sandboxed frame or a private window has none; download the model instead.");
    }
  };
  // One transaction; resolves with `request`'s result once it has committed.
  const run = async (stores, mode, work) => {
    const tx = (await db()).transaction(stores, mode);
    const request = work(tx);
    return new Promise((resolve, reject) => {
      tx.oncomplete = () => resolve(request?.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error || new Error("the model store's transaction was aborted"));
    });
  };
  const fromEmbedded = (key) => embeddedModels.find((m) => m.key === key);
  let usable = null;
  return {
    available() {
      usable ??= open().then(() => true, (e) => {
        console.info("[site] no model store here:", e?.message || e); // the named case: IndexedDB refused
        return false;
      });
      return usable;
    },
    async list() {
      const embedded = embeddedModels.map(({ key, name, bytes, saved }) => ({ key, name, bytes, saved }));
      if (!(await this.available())) return embedded;
      const stored = await run(["meta"], "readonly", (tx) => tx.objectStore("meta").getAll());
      return [...embedded.filter((m) => !stored.some((s) => s.key === m.key)), ...stored];
    },
    async get(key) {
      if (await this.available()) {
        const data = await run(["data"], "readonly", (tx) => tx.objectStore("data").get(key));
        if (data) return data;
      }
      const model = fromEmbedded(key);
      return model ? model.data.slice() : null;
    },
    async put(key, bytes, name) {
      const data = asBytes(bytes); // copied now: a view of Python's memory may move once this awaits
      const meta = { key: String(key), name: String(name ?? key), bytes: data.byteLength, saved: Date.now() };
      await run(["meta", "data"], "readwrite", (tx) => {
        tx.objectStore("data").put(data, meta.key);
        return tx.objectStore("meta").put(meta);
      });
    },
    async remove(key) {
      await run(["meta", "data"], "readwrite", (tx) => {
        tx.objectStore("data").delete(key);
        return tx.objectStore("meta").delete(key);
      });
    },
  };
}

// A copy of the bytes given as a Uint8Array (or another view, an ArrayBuffer, or a PyProxy of a Python buffer).
function asBytes(value) {
  if (value instanceof ArrayBuffer) return new Uint8Array(value.slice(0));
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength));
  if (typeof value?.getBuffer === "function") {
    const buffer = value.getBuffer("u8");
    try {
      return buffer.data.slice();
    } finally {
      buffer.release();
    }
  }
  throw new TypeError(`slmStore.put: the model's bytes must be a Uint8Array, not ${Object.prototype.toString.call(value)}`);
}

self.slmStore = modelStore(); // the portable file's replaces it at 'start', with the models it embeds

// ------------------------------------------------------------------------------------------ stages
function stage(name) {
  post({ type: "stage", stage: name, t: performance.now() });
}

const PRETTY = { numpy: "NumPy", markupsafe: "MarkupSafe", "slm-playground": "the app (slm_playground wheel)" };
const pretty = (name) => PRETTY[name] || name;

// "NumPy (https://.../numpy-2.2.5-...whl)" for a package file, the site-relative path otherwise.
function describe(url) {
  const rel = url.startsWith(root) ? url.slice(root.length) : url;
  const m = /([^/]+?)-\d[^/-]*-[^/]*\.whl$/.exec(url);
  return m ? `${pretty(m[1].replace(/[-_.]+/g, "-").toLowerCase())} (${rel})` : rel;
}

// describe() without the path: "NumPy", "the app (slm_playground wheel)".
const named = (url) => describe(url).replace(/ \([^()]*\)$/, "");

function failedAssets(filter) {
  const hits = failed.filter((f) => filter(f.url));
  return hits.map((f) => `${describe(f.url)}: ${f.reason}`).join("; ");
}

async function loadPackages(names, label) {
  const errors = [];
  let loaded;
  try {
    loaded = await pyodide.loadPackage(names, {
      messageCallback: () => {},
      errorCallback: (m) => errors.push(m),
      checkIntegrity: true,
    });
  } catch (e) {
    errors.push(String(e.message || e));
  }
  const got = new Set((loaded || []).map((p) => p.name));
  const missing = names.filter((n) => !got.has(n));
  if (missing.length || errors.length) {
    // A failed download makes loadPackage give up on every package: name the ones whose files failed.
    const culprits = failed.filter((f) => f.url.endsWith(".whl")).map((f) => named(f.url));
    throw installError(label, culprits.length ? culprits : missing.map(pretty),
      errors.join("\n") || "loadPackage did not load them");
  }
}

// The error of an install that failed: what could not be loaded, and why (the failed downloads, else `detail`).
function installError(label, culprits, detail) {
  const assets = failedAssets((u) => u.endsWith(".whl"));
  return new SiteError(`${label}: could not load ${culprits.join(", ")}`, assets || detail);
}

const PYODIDE_MODULE = "Pyodide's module (build/pyodide/pyodide.mjs)";

// A module's import, started at once; the function returned awaits it (a failure: the SiteError naming it).
function importing(url, what) {
  const module = import(url);
  module.catch(() => {}); // reported where it is awaited
  return async () => {
    try {
      return await module;
    } catch (e) {
      throw new SiteError(what, String(e.message || e));
    }
  };
}

// Pyodide's module starts loading as soon as this worker does, while the page is still busy with 'start'.
// snapshot.js is imported beside it, not before this file runs (a static import would put its round trip
// in front of Pyodide's).
// A worker made from a blob starts them once 'start' has said where the files are.
let importPyodide = fromBlob ? null : importing(`${root}build/pyodide/pyodide.mjs`, PYODIDE_MODULE);
let importSnapshot = fromBlob ? null : importing("./snapshot.js", "Loader (snapshot.js)");

function importFromBlobWorker(msg) {
  root = msg.root;
  embedded = msg.files;
  // In the portable file, the page put pyodide.asm.js and pyodide.js (which sets self.loadPyodide) in front of this
  // file in the worker's script (loader.js workerSource): loadPyodide does not load pyodide.asm.js again.
  importPyodide = embedded
    ? async () => ({ loadPyodide: self.loadPyodide })
    : importing(`${root}build/pyodide/pyodide.mjs`, PYODIDE_MODULE);
}

async function startPyodide(loadPyodide, lock, extra) {
  try {
    pyodide = await loadPyodide({
      indexURL: `${root}build/pyodide/`,
      lockFileContents: lock,
      packageBaseUrl: `${root}build/`,
      stdLibURL: `${root}build/pyodide/python_stdlib.zip`,
      ...extra,
    });
  } catch (e) {
    const assets = failedAssets((u) => u.startsWith(root));
    throw new SiteError(manifest.site.stages.runtime, assets || String(e.message || e));
  }
  self.sitePyodide = pyodide; // for the tests and the benchmark (Playwright evaluates in the worker)
  bytes.runtime += manifest.files["build/pyodide/pyodide.asm.js"].size; // imported as a module: not fetched
  reportProgress();
}

async function fetchText(name, what) {
  try {
    const resp = await fetch(`${root}${name}`);
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    return await resp.text();
  } catch (e) {
    throw new SiteError(`${what} (${name})`, String(e.message || e));
  }
}

// The Python files the app stage runs, requested at the start so that no round trip waits for them later.
function fetchPython(...names) {
  return names.map((name) => {
    const text = fetchText(name, "App bootstrap");
    text.catch(() => {}); // reported where it is awaited
    return text;
  });
}

// The packages' groups installed one after the other (loadPackage takes one call at a time anyway), each whatever
// became of the one before: a promise for each group, settled once it is in. `install(names, label)`: loadPackages,
// or installUnpacked when the download thread unpacks the wheels.
function installInOrder(groups, label, install) {
  let after = Promise.resolve();
  return groups.map((names) => {
    const installed = after.then(() => install(names, label));
    after = installed.catch(() => {});
    return installed;
  });
}

// What loadPackage does with a wheel, for the wheels the download thread unpacked: their files written into
// site-packages, their names in pyodide.loadedPackages. Extension modules (NumPy's, MarkupSafe's) are not loaded
// here: Python's import loads each one when it is first imported (dlopen, synchronous in a worker), so the ones a
// page never imports (NumPy's random generators) are never compiled. Every package of the group is installed
// before a failure is reported, as loadPackage does.
let sitePackages = null;

function installerOfUnpacked(lockPackages) {
  return async (names, label) => {
    sitePackages ??= pyodide.runPython("import site; site.getsitepackages()[0]");
    const failures = [];
    for (const name of names) {
      const entry = lockPackages[name];
      try {
        if (!entry) throw new Error(`${pretty(name)} is not in the lock file`);
        writeFiles(await unpacked.get(packageUrl(entry)));
        pyodide.loadedPackages[name] = "default channel";
      } catch (e) {
        failures.push([name, e]);
      }
    }
    pyodide.runPython("import importlib; importlib.invalidate_caches()"); // new folders for the path finders
    if (failures.length) {
      throw installError(label, failures.map(([name]) => pretty(name)), String(failures[0][1].message));
    }
  };
}

function writeFiles(files) {
  const made = new Set();
  for (const [name, data] of files) {
    const path = `${sitePackages}/${name}`;
    const folder = path.slice(0, path.lastIndexOf("/"));
    if (!made.has(folder)) {
      pyodide.FS.mkdirTree(folder);
      made.add(folder);
    }
    pyodide.FS.writeFile(path, data, { canOwn: true }); // the file keeps these bytes: no copy
  }
}

// The manifest's facts prelude.py reads (the app worker's namespace and the snapshot worker's alike).
const preludeFacts = () => ({
  app_module: manifest.app_module,
  app_stylesheet: manifest.app_stylesheet,
  panel_cdn_root: manifest.panel_cdn_root,
});

// prelude.py (`source`: its text, being fetched): import Panel and the app's module (what a memory snapshot
// holds). `installs` are the packages' groups being installed (none: they are), `appInstalled` the "app" stage's
// wheels: prelude.py imports each group's module (manifest.import_groups) once the group has settled, Panel once all
// have, the app once `appInstalled` has. If an install failed, that failure is the one reported.
async function runPrelude(namespace, source, installs, appInstalled) {
  const prelude = await source;
  const settled = (p) => p.then(() => null, () => null);
  const groups = manifest.import_groups.map((g, i) => [g.module, settled(installs[i] ?? Promise.resolve())]);
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
    throw new SiteError("Starting the app (Python)", lastLines(String(e.message || e)));
  }
  await allIn();
}

// Boot from this build's memory snapshot (being read from the cache: `reading`); false (and the snapshot
// deleted) if there is none or it fails.
async function restoreSnapshot(snapshot, loadPyodide, lock, reading, cacheName) {
  try {
    const saved = await reading;
    if (!saved) return false;
    await startPyodide(loadPyodide, lock, snapshot.restoreOptions(saved));
    await snapshot.finishRestore(pyodide, saved);
    return true;
  } catch (e) {
    console.warn("[site] memory snapshot not usable, starting from the packages:", e);
    pyodide = null;
    await snapshot.discard(root, cacheName).catch(() => {});
    return false;
  }
}

// The manifest (build.py) names the files, their stages and the facts this worker shares with the page and sw.js.
function useManifest(m) {
  manifest = m;
  const zeros = () => Object.fromEntries(Object.keys(m.site.stages).map((s) => [s, 0]));
  bytes = zeros();
  extraTotal = zeros();
  buildCache = m.site.cache_prefix + m.build_id; // this build's cache (sw.js), which also holds the memory snapshot
  return buildCache;
}

// With a first view, the page starts this worker while the first view's bytes are still coming in, and sends 'go'
// once they are in: the small files (the lock, prelude.py, boot.py, Pyodide's module) load meanwhile, the runtime's
// megabytes after them.
let go;
const released = new Promise((resolve) => (go = resolve));

async function start(msg) {
  if (fromBlob) importFromBlobWorker(msg);
  if (msg.models) {
    // The portable file: its models, and no store of its own (available() false, so the app says so).
    const models = msg.models.map((m) => ({ ...m, data: new Uint8Array(m.data) }));
    self.slmStore = modelStore(models, false);
  }
  const cacheName = useManifest(msg.manifest);
  const t0 = performance.now();
  const timings = {};
  const [preludeSource, bootSource] = fetchPython("prelude.py", "boot.py");

  stage("runtime");
  if (msg.keep) keepIn = caches.open(cacheName);
  const lock = fetchLock();
  lock.catch(() => {}); // reported by loadPyodide
  const runtimeIn = runtimeDownloaded();
  const snapshot = msg.snapshot === false ? null : await importSnapshot();
  const reading = snapshot ? snapshot.load(root, cacheName, manifest.build_id) : null;
  reading?.catch(() => {}); // reported by restoreSnapshot()
  // A start from a memory snapshot loads no packages; a start from scratch gets them early. `unpacking`: whether the
  // download thread unpacks them (fetchInThread).
  const thread = !msg.controlled && !fromBlob && typeof Worker !== "undefined" && inflatesRaw();
  const unpacking = embedded ? Promise.resolve(false) : Promise.resolve(reading)
    .then((saved) => !saved && fetchPackagesEarly(lock, runtimeIn, thread))
    .catch(() => false); // no lock: loadPyodide reports it, and loadPackage would fetch the wheels itself
  const { loadPyodide } = await importPyodide();
  bytes.runtime += manifest.files["build/pyodide/pyodide.mjs"].size;
  if (msg.hold) await released;
  const restored = reading !== null && (await restoreSnapshot(snapshot, loadPyodide, lock, reading, cacheName));
  if (!restored) await startPyodide(loadPyodide, lock, {});
  timings.runtime = performance.now() - t0;

  // The packages are installed a group at a time (packagesInOrder), while prelude.py imports what the groups before
  // have installed; the "app" stage's are installed while it imports Panel.
  const lockPackages = (await lock).packages;
  const { groups, app } = packagesInOrder(lockPackages);
  const install = (await unpacking) ? installerOfUnpacked(lockPackages) : loadPackages;
  stage("packages");
  const installs = restored ? [] : installInOrder(groups, manifest.site.stages.packages, install);
  const packagesIn = Promise.all(installs).then(() => {
    timings.packages = performance.now() - t0;
    stage("app");
    post({ type: "status", msg: "Importing Panel and building the app" });
  });
  const appInstalled = restored ? Promise.resolve() : packagesIn.then(() => install(app, manifest.site.stages.app));
  appInstalled.catch(() => {}); // reported by runPrelude()
  const boot = await bootSource;
  py = pyodide.toPy({ location_json: msg.location, ...preludeFacts() });
  await runPrelude(py, preludeSource, installs, appInstalled);
  let result;
  try {
    result = await pyodide.runPythonAsync(boot, { globals: py, filename: "boot.py" });
  } catch (e) {
    throw new SiteError("Starting the app (Python)", lastLines(String(e.message || e)));
  }
  self.siteNamespace = py; // boot.py's names (`playground`), for the tests and the benchmark
  const [docs_json, render_items, root_ids] = result.toJs();
  result.destroy();
  timings.app = performance.now() - t0;
  timings.imports = py.get("timings").toJs({ dict_converter: Object.fromEntries });
  post({ type: "render", docs_json, render_items, root_ids, timings, snapshot: restored ? "restored" : "none" });
}

// The snapshot worker: the app worker's start-up up to prelude.py, its warm_up(), then the snapshot (snapshot.js).
async function makeSnapshot(msg) {
  const cacheName = useManifest(msg.manifest);
  const t0 = performance.now();
  const [preludeSource] = fetchPython("prelude.py");
  const { loadPyodide } = await importPyodide();
  const snapshot = await importSnapshot();
  const { recorder, options } = snapshot.makeOptions();
  await startPyodide(loadPyodide, fetchLock(), options);
  await loadPackages(manifest.packages, manifest.site.stages.packages);
  const namespace = pyodide.toPy(preludeFacts());
  await runPrelude(namespace, preludeSource, [], Promise.resolve());
  const warmUp = namespace.get("warm_up"); // prelude.py: the default page built once and thrown away
  warmUp();
  warmUp.destroy();
  // prelude.py's functions have this namespace as their globals, and it holds JS promises (runPrelude): emptied,
  // or the two would keep each other alive (prelude.py froze them for the garbage collector), and no snapshot could
  // be taken.
  namespace.clear();
  namespace.destroy();
  const size = await snapshot.make(pyodide, recorder, root, cacheName, manifest.build_id);
  post({ type: "snapshot", bytes: size, ms: performance.now() - t0 });
}

// Files dropped on the page (loader.js: [[relative path, ArrayBuffer], ...]) handed to the app's
// playground.inbox.deliver (boot.py deliver_files converts them to [name, bytes] pairs).
async function deliverFiles(files) {
  const pairs = files.map(([name, buffer]) => [name, new Uint8Array(buffer)]);
  const deliver = py.get("deliver_files");
  let taken;
  try {
    taken = await deliver(pairs);
  } finally {
    deliver.destroy();
  }
  if (taken === undefined || taken === null) {
    console.error(`[site] ${files.length} dropped file(s) not delivered: this build's app has no playground.inbox`);
  } else {
    console.info(`[site] ${files.length} dropped file(s) handed to ${taken} playground(s)`);
  }
}

// The store's models with their bytes, for "Save for offline use" (portable.js embeds them).
async function exportModels() {
  const models = [];
  for (const meta of await self.slmStore.list()) {
    const data = await self.slmStore.get(meta.key);
    if (data) models.push({ ...meta, data });
  }
  return models;
}

function lastLines(text) {
  return text.trim().split("\n").slice(-12).join("\n");
}

function sendPatch(patch, buffers, msg_id) {
  post({ type: "patch", patch, buffers, msg_id });
}

function heapBytes() {
  try {
    return pyodide._module.HEAP8.buffer.byteLength;
  } catch {
    return null; // a runtime without that internal: the size is only reported, never needed
  }
}

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === "start") {
      await start(msg);
    } else if (msg.type === "go") {
      go();
    } else if (msg.type === "snapshot") {
      await makeSnapshot(msg);
    } else if (msg.type === "rendered") {
      py.get("link_docs")(sendPatch);
      post({ type: "ready", heapBytes: heapBytes(), loaded: Object.keys(pyodide.loadedPackages), fetched: fetched() });
      const playground = py.get("playground");
      const building = playground.start_building_hidden();
      playground.destroy();
      // The page marks when every view is on it (body[data-views="built"]): tests and benchmarks wait for it.
      building.then(() => post({ type: "views-built" })).finally(() => building.destroy());
    } else if (msg.type === "patch") {
      try {
        await py.get("apply_patch")(msg.patch);
      } finally {
        post({ type: "idle" });
      }
    } else if (msg.type === "location") {
      py.get("set_location")(msg.location);
    } else if (msg.type === "files") {
      await deliverFiles(msg.files);
    } else if (msg.type === "export-models") {
      event.ports[0].postMessage(await exportModels());
    }
  } catch (e) {
    if (e instanceof SiteError) {
      postError(e.what, e.detail);
    } else if (msg.type === "start" || msg.type === "snapshot") {
      postError("Starting the app", String((e && e.stack) || e));
    } else {
      // A failing callback must not take the app down: log it like `panel serve` would.
      console.error(e);
    }
  }
};
