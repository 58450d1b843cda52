// Optimisation of "fetch the runtime": pyodide.asm.wasm is 8.6 MB and 2.8 MB gzipped, and not every static host
// compresses wasm, so the build ships a gzip copy (manifest.site.gzip_copies). A visit downloads the copy unless this
// build's cache holds the file itself (a later visit, which then also gets Chromium's compiled code).
// Feature test: DecompressionStream. Fallback: the file itself.
import { inflatedBody } from "../inflate.js";
import { answered } from "./cache-storage.js";

/** Whether this start may use gzip copies (records the path taken). */
export function gzipCopies(ctx) {
  return ctx.use("gzip-copy", "DecompressionStream" in self, "no DecompressionStream");
}

/** The URL of `url`'s gzip copy to download instead, or null. */
export async function copyOf(ctx, url) {
  const path = url.startsWith(ctx.root) ? ctx.manifest.site.gzip_copies[url.slice(ctx.root.length)] : null;
  if (!path) return null;
  try {
    if ("caches" in self && (await answered(caches.match(url, { cacheName: ctx.cacheName }), "the wasm"))) return null;
  } catch (e) {
    // Cache Storage refused (a private window) or silent (NoAnswer): nothing to take from it, so the copy it is.
    console.info("[site] Cache Storage refused or silent, the wasm comes from its gzip copy:", e?.message || e);
  }
  return `${ctx.root}${path}`;
}

/** The wasm from its gzip copy's response (ok). */
export async function inflated(resp) {
  return new Response(await inflatedBody(resp), { headers: { "Content-Type": "application/wasm" } });
}
