// The app worker: Pyodide and the Panel app, off the page's thread. Also the snapshot worker, a second instance the
// page starts after 'ready' to make a memory snapshot for the next visit, and the learner's worker, which runs a
// lesson's code (learner.js). The messages are protocol.js's.
//
// A start-up runs these stages, in this order (start() below says it once; docs/site.md has the table):
//   network           network.js           every request counted, kept, served from memory in the portable file
//   fetch runtime     runtime.js           Pyodide's module, the lock file; the wasm from its gzip copy (gzip-copy.js)
//   start Python      runtime.js           loadPyodide (compile.js), or from the memory snapshot (memory-snapshot.js)
//   install packages  packages.js          the wheels in import order: requested early (early.js) or downloaded and
//                                          unpacked by a thread (download-thread.js), else by loadPackage
//   import            app.js importApp     prelude.py: Panel and the app's module
//   start the app     app.js startApp      boot.py: the document, sent as Panel's 'render'; slm's SIMD products
//                                          (kernels.js)
//   serve             app.js serve         Panel's protocol: 'rendered', 'patch', 'location'; dropped files
//                                          (dropped-files.js); models from the Hub (hub.js)
import { asSiteError, dispatch, MSG, SiteError, snapshotMade, status } from "../protocol.js";
import { preludeFacts, importApp, sendRender, serve, startApp } from "./app.js";
import { compileOptions } from "./compile.js";
import { context, post } from "./context.js";
import { downloadInThread, downloadThreadUsable, installerOfUnpacked } from "./download-thread.js";
import { requestEarly } from "./early.js";
import { deliverFiles } from "./dropped-files.js";
import { hubFiles } from "./hub.js";
import { fetchKernel, useKernel } from "./kernels.js";
import { startLearner } from "./learner.js";
import { readSnapshot, restore } from "./memory-snapshot.js";
import { network } from "./network.js";
import { filesInOrder, installInOrder, loadPackagesWith, packagesInOrder, packageUrl } from "./packages.js";
import { PY } from "./python-api.js";
import { fetchLock, fetchText, importing, pyodideModule, startPython } from "./runtime.js";
import { modelsWithBytes, modelStore } from "./store.js";

// A worker the page made from a blob (an opaque origin: the portable file, a sandboxed iframe) learns the site's
// root from 'start'; the portable file's also gets the files and the models.
const fromBlob = self.location.protocol === "blob:";
const ownRoot = fromBlob ? null : new URL("./", self.location.href).href;

// Pyodide's module and snapshot.js start loading as soon as this worker runs, while the page is still busy with
// 'start' (a static import would put snapshot.js's round trip in front of Pyodide's).
const imports = fromBlob ? null : {
  pyodide: pyodideModule(ownRoot, false),
  snapshot: importing("./snapshot.js", "Loader (snapshot.js)", { once: true }), // a start goes on without it
};

// The models the app keeps (store.js); the portable file's replaces it at 'start' with the models it embeds.
self.slmStore = modelStore();

// Panel's converter of Python dicts to JS objects for its patches (undefined values become null). Panel makes it by
// evaluating a string, which a worker made from a blob may not do: it runs under its page's CSP
// (py/sitebuild/patches/panel-1.9.4/0004 has Panel take this one).
self.panelDictConverter = (entries) => {
  for (const entry of entries) if (entry[1] === undefined) entry[1] = null;
  return Object.fromEntries(entries);
};

// With a first view, the page starts this worker while the first view's bytes are still coming in, and sends 'go'
// once they are in: the small files load meanwhile, the runtime's megabytes after them.
let go;
const released = new Promise((resolve) => (go = resolve));

/** The start-up, stage by stage. @param {import("../protocol.js").Start} msg @returns the app, serving */
async function start(ctx, msg) {
  const { root } = ctx;
  if (msg.models) self.slmStore = modelStore(msg.models.map((m) => ({ ...m, data: new Uint8Array(m.data) })), false);
  const t0 = performance.now();
  const timings = {};

  // network
  const net = network(ctx, { keep: msg.keep, files: msg.files });
  self.slmHub = hubFiles(net.plain); // the app's Python opens models from the Hub through it (py/playground/hub.py)
  compileOptions(ctx, net);
  const [preludeSource, bootSource] = ["prelude.py", "boot.py"].map((name) => {
    const text = fetchText(ctx, name, "App bootstrap", "app");
    text.catch(() => undefined); // awaited (and reported) by its stage
    return text;
  });
  const kernel = fetchKernel(ctx);

  // fetch runtime
  ctx.stage("runtime");
  const lock = fetchLock(ctx);
  const saved = await readSnapshot(ctx, msg.snapshot !== false && !fromBlob, imports?.snapshot);
  const pyodideImport = imports ? imports.pyodide : pyodideModule(root, Boolean(msg.files));
  // A start from a snapshot loads no packages; a start from scratch gets them early.
  const snapshotData = Promise.resolve(saved?.reading).catch(() => null); // unreadable: none (restore says why)
  const wheels = snapshotData.then(async (data) => {
    if (data || msg.files) return null; // the portable file's wheels are in memory already
    const order = filesInOrder(ctx, (await lock).packages);
    if (downloadThreadUsable(ctx, { controlled: msg.controlled, fromBlob })) return downloadInThread(ctx, net, order);
    requestEarly(ctx, net, order);
    return null;
  });
  wheels.catch(() => undefined); // no lock: loadPyodide reports it, and loadPackage would fetch the wheels itself
  const { loadPyodide } = await pyodideImport();
  net.count(`${root}build/pyodide/pyodide.mjs`, ctx.manifest.files["build/pyodide/pyodide.mjs"].size);
  if (msg.hold) await released;

  // start Python
  let pyodide = await restore(ctx, net, saved, loadPyodide, lock);
  const restored = pyodide !== null;
  pyodide ??= await startPython(ctx, net, loadPyodide, lock, {});
  timings.runtime = performance.now() - t0;

  // install packages
  const lockPackages = (await lock).packages;
  const { groups, app } = packagesInOrder(ctx, lockPackages);
  const unpacked = await wheels.catch(() => null); // no lock: startPython has reported it already
  const install = unpacked ? installerOfUnpacked(ctx, pyodide, net, lockPackages, unpacked, packageUrl)
    : loadPackagesWith(pyodide, net);
  ctx.stage("packages");
  const installs = restored ? [] : installInOrder(groups, ctx.labels.packages, install);
  const packagesIn = Promise.all(installs).then(() => {
    timings.packages = performance.now() - t0;
    ctx.stage("app");
    post(status("Importing Panel and building the app"));
  });
  const appInstalled = restored ? Promise.resolve() : packagesIn.then(() => install(app, ctx.labels.app));
  appInstalled.catch(() => undefined); // importApp awaits it and reports it

  // import
  const namespace = pyodide.toPy({ location_json: msg.location, ...preludeFacts(ctx.manifest) });
  await importApp(ctx, pyodide, namespace, preludeSource, installs, appInstalled);

  // start the app
  await useKernel(ctx, pyodide, kernel);
  const doc = await startApp(pyodide, namespace, bootSource);
  timings.app = performance.now() - t0;
  timings.imports = doc.imports;
  sendRender(ctx, doc, timings, restored);

  // serve
  return serve(ctx, pyodide, namespace);
}

/** The snapshot worker: the app worker's start-up up to prelude.py, its warm_up(), then the snapshot. */
async function makeSnapshot(ctx) {
  const t0 = performance.now();
  const net = network(ctx, { keep: false, files: null });
  compileOptions(ctx, net);
  const preludeSource = fetchText(ctx, "prelude.py", "App bootstrap", "app");
  const { loadPyodide } = await imports.pyodide();
  const snapshot = await imports.snapshot();
  if (!snapshot) throw new SiteError("Memory snapshot", "not made: snapshot.js did not load in time");
  const { recorder, options } = snapshot.makeOptions();
  const pyodide = await startPython(ctx, net, loadPyodide, fetchLock(ctx), options);
  await loadPackagesWith(pyodide, net)(ctx.manifest.packages, ctx.labels.packages);
  const namespace = pyodide.toPy(preludeFacts(ctx.manifest));
  await importApp(ctx, pyodide, namespace, preludeSource, [], Promise.resolve());
  const warmUp = namespace.get(PY.WARM_UP); // the default page built once and thrown away
  warmUp();
  warmUp.destroy();
  // prelude.py's functions have this namespace as their globals, and it holds JS promises (importApp): emptied, or
  // the two would keep each other alive (prelude.py froze them for the garbage collector) and no snapshot be taken.
  namespace.clear();
  namespace.destroy();
  let size;
  try {
    size = await snapshot.make(pyodide, recorder, ownRoot, ctx.cacheName, ctx.manifest.build_id);
  } catch (e) {
    // Storing it failed (the storage quota, Cache Storage refused): a part saved alone is useless, and deleted.
    await snapshot.discard(ownRoot, ctx.cacheName).catch((d) => console.warn("[site] could not delete it:", d));
    throw new SiteError("Memory snapshot", `not saved, the next visit starts without it: ${e?.name}: ${e?.message || e}`);
  }
  post(snapshotMade(size, performance.now() - t0));
}

let app = null; // start()'s result once the app is up: it answers the page's messages from then on
let learner = null; // startLearner()'s result in a learner's worker

// A start that fails reaches the page as 'error' (its panel, with Retry), with the packages installed and the URLs
// fetched so far.
async function starting(ctx, run) {
  try {
    return await run(ctx);
  } catch (e) {
    ctx.report(asSiteError(e, "Starting the app"));
    return null;
  }
}

// The page's messages, each to its handler.
const fromPage = {
  [MSG.START]: async (msg) => {
    app = await starting(context(msg.manifest, msg.root || ownRoot, msg.fallbacks), (ctx) => start(ctx, msg));
  },
  [MSG.GO]: () => go(),
  [MSG.MAKE_SNAPSHOT]: (msg) => starting(context(msg.manifest, ownRoot), makeSnapshot),
  [MSG.RENDERED]: () => app.rendered(),
  [MSG.PATCH]: (msg) => app.patch(msg.patch),
  [MSG.LOCATION]: (msg) => app.location(msg.location),
  [MSG.FILES]: (msg) => deliverFiles(app.namespace, msg.files),
  [MSG.EXPORT_MODELS]: async (msg, event) => event.ports[0].postMessage(await modelsWithBytes(self.slmStore)),
  [MSG.LESSON]: (msg, event) => event.ports[0].postMessage(app.lesson(msg.request)),
  [MSG.LESSON_MODEL]: (msg, event) => {
    const bytes = app.modelNpz();
    event.ports[0].postMessage(bytes, [bytes.buffer]);
  },
  [MSG.LEARNER_START]: async (msg) => {
    const ctx = context(msg.manifest, msg.root || ownRoot, msg.fallbacks);
    learner = await starting(ctx, (c) => startLearner(c, msg, imports?.pyodide));
  },
  [MSG.LEARNER_RUN]: (msg) => learner.run(msg),
};

self.onmessage = async (event) => {
  const msg = event.data;
  try {
    await dispatch(fromPage, msg, "the worker (worker.js)", event);
  } catch (e) {
    // A failing callback must not take the app down: logged, as `panel serve` would.
    console.error(`[site] ${msg.type}:`, e);
  }
};
