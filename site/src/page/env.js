// What the page knows about where it runs, read once when it loads; and window.siteInfo, what the tests and the
// benchmark read (stage end times in ms since navigation start, the packages installed, the wasm heap size, the
// path each optimisation took).

export const body = document.body;
export const query = new URLSearchParams(location.search);
export const $ = (sel) => document.querySelector(sel);
export const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
// embed.html, or ?embed=1: the compact loader, and `embed=1` in the location the app sees.
export const embed = body.dataset.embed === "1" || query.get("embed") === "1";
// A page with an opaque origin (the portable file; embed.html in an iframe sandboxed without allow-same-origin)
// may not start a worker from a URL, nor use Cache Storage or a service worker: it starts the worker from a blob.
export const opaque = self.origin === "null";
export const serviceWorkers = !opaque && "serviceWorker" in navigator;
// ?snapshot=0 neither uses nor makes a memory snapshot.
export const useSnapshot = !opaque && query.get("snapshot") !== "0" && "caches" in self;
// ?fallback=gzip-copy,download-thread,... (or "all") leaves those optimisations out: their plain path is taken.
export const fallbacks = (query.get("fallback") || "").split(",").filter(Boolean);
export const info = (window.siteInfo = { timings: {}, loadedPackages: [], heapBytes: null, paths: {} });

/** Whether to use a page-side optimisation (as the worker's context.use): recorded in siteInfo.paths. */
export function use(name, available, reason) {
  const on = available && !fallbacks.includes(name) && !fallbacks.includes("all");
  info.paths[name] = on ? "on" : `off: ${available ? "forced" : reason}`;
  return on;
}
