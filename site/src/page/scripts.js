// The page's scripts (BokehJS and Panel's JS) and the documents BokehJS draws.
import { SiteError } from "../protocol.js";
import { $ } from "./env.js";
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

/** BokehJS and Panel's JS, in order (async=false keeps the order while downloading in parallel). */
export async function loadMainJs(manifest) {
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
