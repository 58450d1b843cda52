// Files of models opened from the Hugging Face Hub by name (or a mirror with its URL layout), for the app's Python
// (py/playground/hub.py): `self.slmHub.download(url, onProgress)`. Each file comes from Cache Storage when an
// earlier visit kept it, else from the network with progress and Cancel, and is then kept there, so the next visit
// opens the model without a download. The cache is not the build's: a new build keeps the downloads.
import { answered } from "./cache-storage.js";

export const HUB_CACHE = "slm-hub-files";
const REPORT_MS = 100; // progress to Python at most ten times a second: each report may repaint the page

/**
 * @param {typeof fetch} plainFetch the network's fetch without the start-up's counting (network.js `plain`)
 * @returns {{download: (url: string, onProgress: (done: number, total: number|null, cached: boolean) => void) =>
 *   {done: Promise<{status: number, bytes?: Uint8Array, cached?: boolean, notKept?: string|null, reason?: string,
 *     cancelled?: boolean}>,
 *    cancel: () => void}}}
 */
export function hubFiles(plainFetch) {
  const openCache = async () => {
    try {
      return await answered(caches.open(HUB_CACHE), "the Hub's files");
    } catch (e) {
      console.info("[site] the Hub's files are not kept here (no Cache Storage):", e?.message || e);
      return null;
    }
  };
  return {
    download(url, onProgress) {
      const controller = new AbortController();
      const done = (async () => {
        const cache = "caches" in self ? await openCache() : null;
        const hit = cache ? await answered(cache.match(url), url).catch(() => null) : null; // none: download it
        if (hit) {
          const bytes = new Uint8Array(await hit.arrayBuffer());
          onProgress(bytes.byteLength, bytes.byteLength, true);
          return { status: 200, bytes, cached: true };
        }
        const cancelled = () => ({ status: 0, reason: "cancelled", cancelled: true });
        let resp;
        try {
          // No credentials: the page asks for no tokens, and a gated repository answers 401 (named in Python).
          resp = await plainFetch(url, { signal: controller.signal, credentials: "omit", cache: "no-store" });
        } catch (e) { // handled: Cancel, or no answer (Python names it: offline, a mirror without CORS)
          return controller.signal.aborted ? cancelled() : { status: 0, reason: String(e?.message || e) };
        }
        if (!resp.ok) return { status: resp.status, reason: resp.statusText };
        const total = Number(resp.headers.get("content-length")) || null;
        onProgress(0, total, false); // Python may cancel here: the page cannot hold a file this large
        const chunks = [];
        let size = 0;
        let reported = performance.now();
        try {
          const reader = resp.body.getReader();
          for (;;) {
            const { done: end, value } = await reader.read();
            if (end) break;
            chunks.push(value);
            size += value.byteLength;
            if (performance.now() - reported >= REPORT_MS) {
              reported = performance.now();
              onProgress(size, total, false);
            }
          }
        } catch (e) { // handled: Cancel, or the connection lost (Python names it)
          return controller.signal.aborted ? cancelled() : { status: 0, reason: String(e?.message || e) };
        }
        if (controller.signal.aborted) return cancelled();
        onProgress(size, total ?? size, false);
        // One Blob of the chunks: stored as it is, and read once into the bytes Python copies into its heap.
        const blob = new Blob(chunks);
        chunks.length = 0;
        // Kept before the model is shown, so that a reload right after it finds the file. Refused (the quota, a
        // private window): the next visit downloads it again. A browser may also drop what it said it stored (its
        // quota applied after put): looked up once, so the page never claims a copy it does not have.
        const kept = cache ? cache.put(url, new Response(blob, { headers: { "Content-Length": String(size) } }))
          .then(async () => ((await answered(cache.match(url), url)) ? null : "the browser dropped it once stored"))
          .then((why) => why, (e) => {
            console.info(`[site] ${url} not kept for the next visit:`, e?.message || e);
            return String(e?.message || e); // Python says so with the model
          }) : Promise.resolve("no Cache Storage here");
        const [bytes, notKept] = await Promise.all([blob.arrayBuffer(), kept]);
        return { status: 200, bytes: new Uint8Array(bytes), cached: false, notKept };
      })();
      return { done, cancel: () => controller.abort() };
    },
  };
}

/** The models whose files this browser keeps ("owner/name@revision", from the cache's URLs), for the offline copy. */
export async function keptHubModels() {
  if (!("caches" in self)) return [];
  const cache = await answered(caches.open(HUB_CACHE), "the Hub's files");
  const names = new Set();
  for (const request of await cache.keys()) {
    const m = /([^/]+)\/([^/]+)\/resolve\/([^/]+)\/[^/]+$/.exec(new URL(request.url).pathname);
    if (m) names.add(`${m[1]}/${m[2]}@${decodeURIComponent(m[3])}`);
  }
  return [...names];
}
