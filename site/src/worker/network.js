// Every request of the app worker passes here (self.fetch is replaced): the bytes are counted per stage for the
// page's progress bars, a failed runtime file is reported at once (Pyodide can hang on a missing wasm), the
// portable file's files are served from memory, responses requested early are handed over, and on a first visit
// the runtime's files are kept in this build's cache (no service worker stands in between yet).
import { progress, SiteError } from "../protocol.js";
import { post } from "./context.js";
import { copyOf, gzipCopies, inflated } from "./gzip-copy.js";
import { describe, named } from "./error-labels.js";

// The runtime's own downloads, after which the wheels may be requested (early.js, download-thread.js).
const RUNTIME_DOWNLOADS = ["build/pyodide/pyodide.asm.wasm", "build/pyodide/python_stdlib.zip"];

/**
 * Installs the worker's fetch for this start.
 * @param ctx context.js
 * @param {{keep: boolean, files: object|null}} options keep: store the runtime's files in this build's cache;
 *   files: the portable file's (path -> {bytes, type})
 * @returns the network: {download, count, asked, answered, failedAssets, assetFailed, runtimeIn, early, fetched,
 *   servedCopy, plain}
 */
export function network(ctx, { keep, files }) {
  const { root, manifest } = ctx;
  const zeros = () => Object.fromEntries(Object.keys(ctx.labels).map((s) => [s, 0]));
  const bytes = zeros(); // stage -> bytes downloaded
  const extraTotal = zeros(); // stage -> sizes learnt from Content-Length (CDN files)
  const failed = []; // [{url, reason}]: every fetch that failed, named on the error panel
  const thread = []; // URLs the download thread fetched
  const early = new Map(); // absolute URL -> Promise<Response> requested before Pyodide asks
  const waiting = new Set(); // absolute URLs asked for whose last byte is not in: a stall's panel names them
  const runtimeEnds = new Map(); // absolute URL -> resolve(the promise of its last byte)
  const useCopies = !files && gzipCopies(ctx);
  const realFetch = self.fetch.bind(self);
  let timer = null;
  const report = () => post(progress({ ...bytes }, { ...extraTotal }, [...waiting].map((u) => named(u, root))));
  // Told at once, not on the count's timer: a request that never gets an answer is what a stall's panel names.
  const asked = (...urls) => {
    for (const url of urls) waiting.add(url);
    report();
  };
  const answered = (url) => waiting.delete(url) && report();
  let keepIn = null; // Promise<Cache> while storing this visit's runtime files
  if (keep) {
    keepIn = caches.open(ctx.cacheName);
    keepIn.catch((e) => console.info("[site] Cache Storage refused: this visit's files are not kept:", e?.message || e));
  }

  const rel = (url) => (url.startsWith(root) ? url.slice(root.length).split("?")[0] : null);
  const stageOf = (url) => {
    if (manifest.files[rel(url)]) return manifest.files[rel(url)].stage;
    for (const r of Object.values(manifest.remote)) if (r.url === url) return r.stage;
    return "runtime";
  };
  const knownSize = (url) => manifest.files[rel(url)]?.size ?? null;

  const net = {
    servedCopy: false, // whether the wasm came from its gzip copy (compile.js)
    early,
    /** Counts `size` bytes of `url` (or of a stage's file) for the progress bars. */
    count(url, size, stage = stageOf(url)) {
      bytes[stage] += size;
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        report();
      }, 100);
    },
    addTotal(url, size) {
      extraTotal[stageOf(url)] += size;
    },
    threadFetched(url) {
      thread.push(url);
    },
    asked,
    answered,
    fetched: () => [...performance.getEntriesByType("resource").map((e) => e.name), ...thread],
    /** A file could not be downloaded: noted for the error panel; a runtime file is reported at once. */
    assetFailed(url, reason) {
      failed.push({ url, reason });
      if (knownSize(url) !== null && stageOf(url) === "runtime") {
        ctx.report(new SiteError(`${ctx.labels.runtime}: could not download ${named(url, root)}`, `${url}: ${reason}`,
          "runtime"));
      }
    },
    /** "name (path): reason; ..." of the failed downloads `filter` picks, or "". */
    failedAssets(filter) {
      return failed.filter((f) => filter(f.url)).map((f) => `${describe(f.url, root)}: ${f.reason}`).join("; ");
    },
    failedWheels: () => failed.filter((f) => f.url.endsWith(".whl")).map((f) => named(f.url, root)),
    /** Resolves once the runtime's own files are in (the wheels' downloads wait for it). */
    runtimeIn: Promise.all(RUNTIME_DOWNLOADS.map((path) => new Promise((resolve) => runtimeEnds.set(`${root}${path}`, resolve)))),
    download,
    plain: realFetch, // the browser's fetch: the Hub's files (hub.js) count their own progress, for the app
  };
  ctx.fetched = net.fetched;

  self.fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input), root).href;
    if (files && url.startsWith(root)) return fromMemory(url);
    const requested = early.get(url);
    if (requested) {
      early.delete(url);
      return requested;
    }
    return download(url, input, init);
  };

  // Counts bytes from a clone and hands Pyodide the untouched response: a synthetic Response would lose its URL,
  // and with it Chromium's compiled-wasm code cache (except for a gzip copy).
  async function download(url, input, init) {
    asked(url);
    const finished = () => answered(url);
    const copy = useCopies ? await copyOf(ctx, url) : null;
    let resp;
    try {
      resp = await realFetch(copy || input, copy ? undefined : init);
    } catch (e) {
      finished();
      net.assetFailed(copy || url, `network error (${e.message || e})`);
      throw e;
    }
    if (!resp.ok || !resp.body || init?.integrity) finished(); // in whole (integrity), or nothing more to come
    if (!resp.ok) {
      net.assetFailed(copy || url, `HTTP ${resp.status}`);
      return resp;
    }
    const size = knownSize(url) ?? Number(resp.headers.get("content-length") || 0);
    if (knownSize(url) === null) net.addTotal(url, size);
    if (init?.integrity) {
      // A package file (loadPackage checks each one's sha256): the promise resolves once the whole file is in, so
      // it is counted now; the service worker keeps it after 'ready'.
      net.count(url, size);
      return resp;
    }
    if (resp.body) {
      const reader = resp.clone().body.getReader();
      const counted = (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          net.count(url, value.byteLength);
        }
      })().finally(finished);
      // A broken stream: the response's own reader (Pyodide's) fails and reports it; the count just stops.
      counted.catch((e) => console.info(`[site] counting ${url} stopped:`, e?.message || e));
      runtimeEnds.get(url)?.(counted);
    }
    if (copy) {
      extraTotal[stageOf(url)] += knownSize(copy) - size; // the page's total counts the file itself
      resp = await inflated(resp);
      net.servedCopy = true;
    }
    // A decompressed copy is kept under the file's own name whether or not this visit keeps its other downloads: a
    // later visit gets it from there, and Chromium its compiled code. (No Cache Storage with an opaque origin.)
    const ours = url.startsWith(root) || Object.values(manifest.remote).some((r) => r.url === url);
    const cache = copy && !keepIn && "caches" in self ? caches.open(ctx.cacheName) : ours && keepIn;
    if (cache) {
      const kept = resp.clone();
      // Storing may be refused (a private window, the quota): it only costs the next visit a download.
      cache.then((c) => c.put(url, kept)).catch((e) => console.info(`[site] ${url} not kept for the next visit:`, e?.message || e));
    }
    return resp;
  }

  // The portable file: a file from the bytes the page sent, counted whole (reading a copy of its stream, as for a
  // download, stalls WebKit's streaming wasm compile). The Response copies the bytes: a file can be served again.
  async function fromMemory(url) {
    const file = files[rel(url)];
    if (!file) {
      net.assetFailed(url, "not in the portable file");
      return new Response(null, { status: 404, statusText: "not in the portable file" });
    }
    net.count(url, file.bytes.byteLength);
    return new Response(file.bytes, { headers: { "Content-Type": file.type } });
  }

  return net;
}
