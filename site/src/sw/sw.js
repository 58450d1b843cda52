// Service worker: every asset the site loads (including NumPy from the Pyodide CDN when not vendored) is kept
// in a cache named after the build id, so a second visit is served locally and works offline. A rebuild has a
// new id -> loader.js registers sw.js?build=<new id> -> this worker replaces the old one and drops its cache.
// A first visit does not wait for it: its app worker stores the runtime files it downloads, and once the app is
// ready (or has failed) loader.js registers this one and sends 'keep' with every URL the visit fetched. What is
// not stored yet comes from the browser's HTTP cache (revalidated, not downloaded again); then it takes control
// of the page (`navigator.serviceWorker.controller` set: everything is stored), and what the page fetches later
// passes through it. (A page that another build's service worker controls moves to this one when it activates.)
// The facts this worker shares with the page and the app worker (cache name prefix, shell files, pages, CDN) are
// the build's (build.py writes them into the manifest and into this file's import).
import { AGAIN, dispatch, kept, MSG } from "../protocol.js";

importScripts("build/site-facts.js");
const FACTS = self.siteFacts;
const BUILD = new URL(self.location.href).searchParams.get("build") || "unversioned";
const CACHE = FACTS.cache_prefix + BUILD;
const scope = new URL("./", self.location.href).href;
const CDN = FACTS.cdn;
// Small files that change with a rebuild under the same URL: network first, cache when offline.
const FRESH = new Set(["", ...FACTS.shell_files, FACTS.manifest]);

// Both pages, whichever of them this visit opened, so that either works offline next time.
const PAGES = ["./", ...FACTS.pages];

// With them, the page's scripts (BokehJS, Panel's JS: ~2.7 MB that the page compiles on every start): Chromium
// keeps V8's compiled code of a script that a service worker stores while it installs, so the next visit's page
// reads that instead of compiling them again on its thread while the app worker restores Python. Stored later
// (`keep`), a script has its code kept only once it has run from the cache, a visit later.
const INSTALLED = [...PAGES, ...FACTS.main_js];

self.addEventListener("install", (event) => {
  self.skipWaiting();
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(INSTALLED)));
});

// Store what a visit fetched before this worker controlled it (a URL that fails is skipped: the next visit
// fetches it again), then control the page. A module the worker imported again (`?again`, worker/runtime.js) is the
// same file: it is kept under the URL the next visit imports.
async function keep(urls) {
  const cache = await caches.open(CACHE);
  const ours = [...new Set(urls.map((u) => u.split("#")[0]))].filter((u) => u.startsWith(scope) || u.startsWith(CDN));
  const store = async (u) => {
    const key = u.endsWith(AGAIN) ? u.slice(0, -AGAIN.length) : u;
    if (await cache.match(key)) return;
    const resp = await fetch(u);
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    await cache.put(key, resp);
  };
  await Promise.allSettled(ours.map(store));
  await self.clients.claim();
}

// The page's messages, each to its handler.
const fromPage = {
  [MSG.KEEP]: (msg, event) => event.waitUntil(keep(msg.urls).finally(() => event.ports[0]?.postMessage(kept()))),
};

self.addEventListener("message", (event) => dispatch(fromPage, event.data, "the service worker (sw.js)", event));

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith(FACTS.cache_prefix) && name !== CACHE) await caches.delete(name);
    }
  })());
});

// The cache write runs alongside (waitUntil): the page streams the response while it is stored.
async function networkFirst(event, request) {
  const cache = await caches.open(CACHE);
  try {
    const resp = await fetch(request, { cache: "no-store" }); // not revalidated: see loader.js fetchManifest
    if (resp.ok) event.waitUntil(cache.put(request, resp.clone()));
    return resp;
  } catch (e) {
    const hit = await cache.match(request, { ignoreSearch: true });
    if (hit) return hit;
    throw e;
  }
}

async function cacheFirst(event, request) {
  const cache = await caches.open(CACHE);
  const hit = await cache.match(request);
  if (hit && (await intact(hit, request.integrity))) return hit;
  if (hit) {
    // A damaged copy would fail every start (and every Retry) until the site's data were cleared: fetch it again.
    console.warn(`[site] the cached ${request.url} does not match its sha256: fetched again`);
    await cache.delete(request);
  }
  const resp = await fetch(request);
  if (resp.ok) event.waitUntil(cache.put(request, resp.clone()));
  return resp;
}

// Whether a cached response matches the request's integrity ("sha256-<base64>", as loadPackage asks for each wheel).
async function intact(resp, integrity) {
  const expected = /^sha256-(.+)$/.exec(integrity || "")?.[1];
  if (!expected) return true;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", await resp.clone().arrayBuffer()));
  return btoa(String.fromCharCode(...digest)) === expected;
}

self.addEventListener("fetch", (event) => {
  const { request } = event;
  if (request.method !== "GET") return;
  const url = request.url.split("#")[0];
  if (url.startsWith(scope)) {
    const rel = url.slice(scope.length).split("?")[0];
    event.respondWith(FRESH.has(rel) || request.mode === "navigate" ? networkFirst(event, request) : cacheFirst(event, request));
  } else if (url.startsWith(CDN)) {
    event.respondWith(cacheFirst(event, request)); // integrity-checked wasm wheels, immutable per version
  }
});
