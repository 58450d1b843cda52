// Optimisation of the page's start: the build's pre-rendered first view (sitebuild/first_view.py), the default
// state's page drawn with BokehJS alone while Python starts. Feature test: the build has one, the page is neither
// embedded nor the portable file, and its URL sets none of the app's state parameters (it never shows numbers for
// another prompt than the URL's). Fallback: the loading screen until the live app.
import { $, body, embed, info, query, use } from "./env.js";
import { portable } from "./portable-file.js";
import { failed } from "./screen.js";
import { embedDocument } from "./scripts.js";

/** Whether to show it; `cached`: this build's service worker serves the visit (ready in about a second anyway). */
export function firstViewWanted(manifest, cached) {
  const why = !manifest.first_view ? "the build has none" : embed ? "an embedded page" : portable ? "the portable file"
    : cached ? "served from this build's cache" : manifest.first_view.state_params.some((p) => query.has(p))
      ? "the URL sets the app's state" : null;
  return use("first-view", !why, why);
}

export async function fetchFirstView(manifest) {
  const resp = await fetch(manifest.first_view.path);
  if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
  return resp.json();
}

/** Draws it once its document and the page's scripts are in, unless the live app came first. */
export async function showFirstView(firstView, mainJs) {
  try {
    const [msg] = await Promise.all([firstView, mainJs]);
    if (body.dataset.ready || failed() || $("#app").children.length) return; // the live app came first
    body.dataset.firstView = "shown";
    const app = $("#app");
    app.inert = true; // a picture of the app until it is live: nothing to focus or press
    app.setAttribute("aria-busy", "true");
    await embedDocument(msg, "first-view");
    info.timings.firstView = performance.now();
  } catch (e) {
    // The named case: no first view after all; the live app still comes, only the head start is lost.
    console.warn("[site] no first view:", e);
    delete body.dataset.firstView;
  }
}
