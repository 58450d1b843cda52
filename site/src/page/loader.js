// The page: the loading screen, BokehJS, the app worker, and what a visit leaves for the next one. `document.body`
// gets data-ready="1" once the app is interactive (data-error="1" when it failed, data-error-stage naming the
// stage); `window.siteInfo` holds what the tests and the benchmark read (env.js). `data-snapshot` says whether the
// worker started from this build's memory snapshot ("restored") or, after a start without one, how making it for
// the next visit went ("saving", "saved", "failed").
//
// The page's stages, in this order (main() below says it once):
//   manifest     build/manifest.json, never revalidated
//   hand-over    a page another build's service worker controls moves to this build's (service-worker.js)
//   first view   the pre-rendered picture of the app while Python starts (first-view.js), its bytes first; the
//                page's scripts from their gzip copies (scripts.js)
//   worker       the app worker's stages (worker.js), the progress shown (screen.js)
//   render       BokehJS draws the app's document; ready
//   keep         the service worker stores the visit's files; a memory snapshot is made for the next visit
import { asSiteError, go, SiteError } from "../protocol.js";
import { spawnWorker, startWorker, saveSnapshot } from "./app-worker.js";
import { dropTarget } from "./drop.js";
import { $, body, fallbacks, info, serviceWorkers, useSnapshot } from "./env.js";
import { fetchFirstView, firstViewWanted, showFirstView } from "./first-view.js";
import { lessonsWhenReady } from "./lessons.js";
import { offerOfflineCopy } from "./offline-copy.js";
import { portable, portableStylesheets } from "./portable-file.js";
import { fail, stageRows, tick, watchdog } from "./screen.js";
import { arrived, inflatedCopies, loadMainJs, preload, scriptCopiesWanted } from "./scripts.js";
import { keepForNextVisit, replaceOtherBuildsServiceWorker, thisBuilds } from "./service-worker.js";

const drops = dropTarget();

async function fetchManifest() {
  if (portable) return portable.manifest;
  let resp;
  try {
    // no-store: a revalidation sends the cached copy's date, and a host answers 304 to a rolled-back build whose
    // files are older than it, which would keep the newer build running.
    resp = await fetch("build/manifest.json", { cache: "no-store" });
  } catch (e) {
    throw new SiteError("Site manifest (build/manifest.json)", `network error: ${e.message}`, "manifest");
  }
  if (!resp.ok) {
    throw new SiteError("Site manifest (build/manifest.json)", `HTTP ${resp.status} — was \`python build.py\` run?`, "manifest");
  }
  return resp.json();
}

let viewsBuilt;
const allViewsBuilt = new Promise((resolve) => (viewsBuilt = resolve));

/**
 * Once the app is live: dropped files go to it (a lesson file to the lesson panel), the URL's lesson opens, the
 * offline copy is offered, the visit kept, a snapshot made.
 */
function whenReady(worker, manifest) {
  drops.ready(worker, lessonsWhenReady(worker, manifest));
  offerOfflineCopy(worker, manifest);
  const kept = keepForNextVisit(manifest.build_id, [...(info.fetched || [])]);
  if (useSnapshot) {
    if (info.snapshot === "restored") body.dataset.snapshot = "restored";
    // Once every view is built (the app holds that back while a link's training runs): the snapshot worker's
    // start-up would otherwise take a core from the learner's first minute.
    else saveSnapshot(manifest, Promise.all([kept, allViewsBuilt]));
  }
}

const HOLD_MAX_MS = 10_000;

async function main() {
  $("#retry").addEventListener("click", () => location.reload());
  tick();
  watchdog();
  // A page no service worker controls (a first visit, the portable file) starts the worker at once, so that its
  // script has run by the time the manifest is in. A controlled page starts it once this build's service worker is
  // in charge: another build's would serve that build's worker.js.
  const early = serviceWorkers && navigator.serviceWorker.controller ? null : Promise.resolve().then(spawnWorker);
  early?.catch(() => undefined); // awaited below, where its failure is reported
  try {
    // manifest
    const manifest = await fetchManifest();
    info.timings.manifest = performance.now();
    info.build = manifest.build_id;
    stageRows(manifest);
    // hand-over
    await replaceOtherBuildsServiceWorker(manifest.build_id);
    info.timings.serviceWorker = performance.now();
    if (portable) await portableStylesheets(manifest);
    // first view: not on a visit this build's service worker serves from its cache (ready in about a second; drawing
    // the first view meanwhile made it later). Its bytes (BokehJS, Panel's JS, the document) come before the
    // runtime's: on a slow link they would otherwise share it with the wasm. Downloaded, not yet run; the worker
    // requests the runtime once they are in ('go').
    const cached = thisBuilds(manifest.build_id);
    const withFirstView = firstViewWanted(manifest, cached);
    const scripts = scriptCopiesWanted(cached) ? inflatedCopies(manifest) : null; // downloading from now on
    let firstView = null;
    let firstBytes = null;
    if (withFirstView) {
      firstView = fetchFirstView(manifest);
      const files = [...manifest.site.main_js, manifest.first_view.path];
      firstBytes = scripts ? Promise.allSettled([scripts, firstView])
        : Promise.race([arrived(files), Promise.allSettled([preload(manifest.site.main_js), firstView])]);
    }
    // worker
    const worker = await (early || spawnWorker());
    // BokehJS keeps this thread busy for about half a second: it runs once the worker has begun (its first message;
    // Chromium runs a new worker's script only when this thread is free) and once 'go' is sent.
    const running = new Promise((resolve) => worker.addEventListener("message", resolve, { once: true }));
    // The hold only orders the bytes on a slow link, so it never stops a start: a file that does not arrive (a
    // stalled download, a preload whose load event never fires) releases the worker after HOLD_MAX_MS.
    const held = firstBytes && Promise.race([firstBytes, new Promise((resolve) => setTimeout(resolve, HOLD_MAX_MS))]);
    const released = held?.then(() => worker.postMessage(go()));
    const mainJs = Promise.all([running, released, scripts]).then(([, , urls]) => loadMainJs(manifest, urls));
    mainJs.catch((e) => fail(asSiteError(e, "Loading the page", "runtime")));
    if (withFirstView) showFirstView(firstView, mainJs);
    // render, ready, keep
    await startWorker(worker, manifest, mainJs, withFirstView, fallbacks, {
      viewsBuilt,
      ready: (msg) => {
        info.fetched = msg.fetched;
        whenReady(worker, manifest);
      },
    });
  } catch (e) {
    fail(asSiteError(e, "Loading the page"));
  }
}

main();
