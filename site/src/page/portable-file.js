// The portable file (one HTML file opened from disk, written by portable.js): the page itself holds the site's
// files, indexed by its one JSON block, each checked against its sha256 before use.
import { SiteError } from "../protocol.js";

/** The portable file's index ({manifest, parts, models}), or null on the hosted site. */
export const portable = (() => {
  const el = document.querySelector('script[type="application/json"]');
  return el ? JSON.parse(el.textContent) : null;
})();

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
const decoded = new Map(); // path -> Promise<Blob>

/**
 * An embedded file as a Blob, once its sha256 matches the index (as Pyodide checks the hosted site's downloads
 * against its lock file); a damaged copy stops the page with the file's name.
 */
export function embeddedFile(path) {
  if (!decoded.has(path)) {
    decoded.set(path, (async () => {
      const part = portable.parts.find((p) => p.path === path);
      if (!part) throw new SiteError(`Portable file: ${path}`, "not in this file", "runtime");
      let bytes = fromBase64(document.getElementById(part.id).textContent);
      if (part.encoding === "gzip") {
        const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
        bytes = new Uint8Array(await new Response(stream).arrayBuffer());
      }
      if (bytes.length !== part.size || (await sha256Hex(bytes)) !== part.sha256) {
        throw new SiteError(`Portable file: ${path}`, "the embedded copy is damaged (its sha256 does not match)", "runtime");
      }
      return new Blob([bytes], { type: MIME[path.split(".").pop()] || "application/octet-stream" });
    })());
  }
  return decoded.get(path);
}

/**
 * What the worker fetches in the portable file: everything but what this page itself uses, as path -> {bytes, type}
 * with the ArrayBuffers to transfer. Not as Blobs: a worker cannot read the Blobs its file:// page posts it in WebKit
 * (WebKitGTK 2.50: every read of them fails with NotReadableError).
 */
export async function workerFiles() {
  const own = (path) => path.startsWith("build/vendor/") || ["loader.js", "worker.js", "style.css"].includes(path);
  const paths = portable.parts.map((p) => p.path).filter((path) => !own(path));
  const files = await Promise.all(paths.map(async (path) => {
    const blob = await embeddedFile(path);
    return { bytes: await blob.arrayBuffer(), type: blob.type };
  }));
  return [Object.fromEntries(paths.map((path, i) => [path, files[i]])), files.map((f) => f.bytes)];
}

/** The models the file embeds ([{key, name, bytes, saved, data: ArrayBuffer}], checked), for the worker's store. */
export async function portableModels() {
  return Promise.all((portable.models || []).map(async (m) => {
    const data = fromBase64(document.getElementById(m.id).textContent);
    if (data.length !== m.bytes || (await sha256Hex(data)) !== m.sha256) {
      throw new SiteError(`Portable file: the model ${m.name}`, "the embedded copy is damaged (its sha256 does not match)");
    }
    return { key: m.key, name: m.name, bytes: m.bytes, saved: m.saved, data: data.buffer };
  }));
}

// The stylesheets the document names by URL (Panel's, under manifest.panel_cdn_root, and the app's,
// manifest.app_stylesheet): in the portable file those URLs are rewritten to blob: URLs of the embedded copies
// (docsJson and every patch).
let vendorUrls = null;

export async function portableStylesheets(manifest) {
  const prefix = manifest.panel_cdn_root.replace(/^\.\//, "");
  const app = manifest.app_stylesheet.replace(/^\.\//, "");
  const paths = portable.parts.map((p) => p.path)
    .filter((p) => (p.startsWith(prefix) && !p.endsWith(".js")) || p === app);
  const blobs = await Promise.all(paths.map(embeddedFile));
  vendorUrls = new Map(paths.map((path, i) => [`./${path}`, URL.createObjectURL(blobs[i])]));
}

/** `text` with the stylesheet URLs of the portable file's copies (unchanged on the hosted site). */
export function localUrls(text) {
  return vendorUrls ? text.replace(/\.\/build\/[\w./-]+/g, (url) => vendorUrls.get(url) || url) : text;
}

/** A Panel patch with localUrls applied (a string or an object). */
export function localPatch(patch) {
  if (!vendorUrls) return patch;
  return typeof patch === "string" ? localUrls(patch) : JSON.parse(localUrls(JSON.stringify(patch)));
}
