// The service worker (sw.js) keeps every asset for the next visit (and offline). A first visit does not wait for it
// (registering it and routing every download through it costs the start-up CPU): once the app is ready or has
// failed, keepForNextVisit() registers it and hands it what the visit fetched. A page still controlled by another
// build's service worker waits (briefly) until this build's takes over: the old one's cache-first answers would be
// stale.
import { dispatch, keep, MSG } from "../protocol.js";
import { serviceWorkers } from "./env.js";

export const thisBuilds = (buildId) =>
  serviceWorkers && navigator.serviceWorker.controller?.scriptURL.endsWith(`build=${buildId}`);

export async function replaceOtherBuildsServiceWorker(buildId) {
  if (!serviceWorkers || !navigator.serviceWorker.controller || thisBuilds(buildId)) return false;
  try {
    await navigator.serviceWorker.register(`sw.js?build=${buildId}`);
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, 3000);
      navigator.serviceWorker.addEventListener("controllerchange", () => {
        if (thisBuilds(buildId)) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  } catch (e) {
    // The named case: no service worker here (refused storage, a private window): the visit goes on without one.
    console.warn("[site] service worker not available:", e);
  }
  return true;
}

/** Resolves when `promise` does, or after `ms` with "timeout": a stuck service worker must not hold up the snapshot. */
export const within = (ms, promise) => Promise.race([promise, new Promise((r) => setTimeout(() => r("timeout"), ms))]);

export async function keepForNextVisit(buildId, fetchedByWorker) {
  if (!serviceWorkers) return;
  try {
    const registration = await navigator.serviceWorker.register(`sw.js?build=${buildId}`);
    if (thisBuilds(buildId)) return; // it controlled this visit: everything passed through it
    const sw = registration.installing || registration.waiting || registration.active;
    const settled = () => sw.state === "activated" || sw.state === "redundant";
    if (!settled()) {
      await within(30000, new Promise((resolve) => sw.addEventListener("statechange", () => settled() && resolve())));
    }
    if (sw.state !== "activated") {
      console.warn(`[site] the service worker did not activate (${sw.state}): the next visit tries again`);
      return;
    }
    const urls = [location.href, ...performance.getEntriesByType("resource").map((e) => e.name), ...fetchedByWorker];
    const channel = new MessageChannel();
    const kept = new Promise((resolve) => {
      channel.port1.onmessage = (e) => dispatch({ [MSG.KEPT]: () => resolve() }, e.data, "the page (sw.js's answer)");
    });
    sw.postMessage(keep(urls), [channel.port2]);
    if ((await within(60000, kept)) === "timeout") console.warn("[site] the service worker did not confirm storing");
  } catch (e) {
    // The named case: no service worker, or Cache Storage refused: this visit is not kept, and says so.
    console.warn("[site] service worker not available: this visit's files are not kept:", e);
  }
}
