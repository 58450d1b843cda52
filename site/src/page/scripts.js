// The page's scripts (BokehJS and Panel's JS) and the documents BokehJS draws.
import { inflatedBody } from "../inflate.js";
import { SiteError } from "../protocol.js";
import { $, use } from "./env.js";
import { embeddedFile, localUrls, portable } from "./portable-file.js";
import { addMainJsBytes } from "./screen.js";

/**
 * Downloads these scripts without running them (the scripts that name them later get the same bytes); resolves
 * once every one has loaded or failed (its <script> then reports the failure).
 */
export function preload(paths) {
  return Promise.all(paths.map((path) => new Promise((resolve) => {
    const link = document.createElement("link");
    link.rel = "preload";
    link.as = "script";
    link.href = path;
    link.onload = link.onerror = resolve;
    document.head.appendChild(link);
  })));
}

/**
 * Resolves once each of these files has arrived (its resource timing entry is there). A preload's load event can
 * come much later: Chromium fires it once the script is compiled as well.
 */
export function arrived(paths) {
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

// Optimisation of the page's scripts: many static hosts send JavaScript uncompressed, and BokehJS and Panel's JS
// are 2.7 MB, 0.7 MB gzipped. A visit that this build's service worker does not serve downloads their gzip copies,
// inflates them and runs them from blob: URLs (the pages' CSP allows blob: scripts). Feature test:
// DecompressionStream; not the portable file (its files are embedded); not served from this build's cache, which
// holds the scripts themselves with Chromium's compiled code. Fallback: the scripts themselves.

/** Whether this visit runs the page's scripts from their gzip copies (recorded in siteInfo.paths). */
export function scriptCopiesWanted(cached) {
  const why = !("DecompressionStream" in self) ? "no DecompressionStream" : portable ? "the portable file"
    : cached ? "served from this build's cache" : null;
  return use("script-copies", !why, why);
}

/**
 * Downloads the gzip copies of the page's scripts now; resolves, once every one is in, to the URLs to run them from
 * (blob: URLs of the inflated scripts).
 */
export function inflatedCopies(manifest) {
  return Promise.all(manifest.site.main_js.map(async (src) => {
    const copy = manifest.site.gzip_copies[src];
    try {
      const resp = await fetch(copy);
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      const js = new Response(await inflatedBody(resp), { headers: { "Content-Type": "text/javascript" } });
      return URL.createObjectURL(await js.blob());
    } catch (e) {
      // The named case: the copy did not come whole (a cut-off download, a host without it): the script itself is
      // loaded instead, and its <script> reports the failure if that fails too.
      console.warn(`[site] ${copy}: ${e.message || e}; loading ${src} itself`);
      return src;
    }
  }));
}

/**
 * BokehJS and Panel's JS, in order (async=false keeps the order while downloading in parallel); `urls`: where to
 * run each from (inflatedCopies), else the files themselves (the portable file: its embedded files).
 */
export async function loadMainJs(manifest, urls = null) {
  urls ??= portable
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
            if (urls[i].startsWith("blob:")) URL.revokeObjectURL(urls[i]); // run: its bytes are no longer needed
            addMainJsBytes(manifest.files[src]?.size || 0);
            resolve();
          };
          el.onerror = () => reject(new SiteError(`Browser library (${src})`, "failed to load", "runtime"));
          document.head.appendChild(el);
        }),
    ),
  );
}

const shown = new Map(); // box in #app -> its BokehJS views and document (embedDocument)

/**
 * Renders a document (Panel's 'render' message, or the build's first view in the same form) into a new box in
 * #app; its BokehJS document. The live app is drawn invisibly over the first view (same place, same width) and
 * replaces it once drawn: the layout does not move.
 */
export async function embedDocument(msg, prefix = "app") {
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
