// Optimisation of "install the packages": the wheels downloaded and unpacked on a thread of their own
// (fetcher.js, which inflates each wheel's members with DecompressionStream("deflate-raw")). This worker's thread is
// busy with Python for up to a second at a time: a response arriving meanwhile would wait, and Pyodide's
// loadPackage would unpack each wheel here, in Python (~950 files). The thread is made at once but given the wheels
// only once the runtime's files are in (downloading beside them held the runtime up). Feature test: a worker may
// start a worker from a URL (not one made from a blob), no service worker serves the page (a nested worker's
// requests need not pass through it: offline they would fail), and "deflate-raw" exists. Fallback: early.js and
// loadPackage.
import { installError } from "./packages.js";
import { pretty } from "./error-labels.js";

// fetcher.js inflates with DecompressionStream("deflate-raw") (Chromium 103, Firefox 113, Safari 16.4).
function inflatesRaw() {
  try {
    return Boolean(new DecompressionStream("deflate-raw"));
  } catch (e) {
    console.info("[site] no deflate-raw here: the wheels are unpacked by loadPackage", e?.message || e);
    return false;
  }
}

/** Whether this start may use the download thread (records the path taken). */
export function downloadThreadUsable(ctx, { controlled, fromBlob }) {
  const why = fromBlob ? "a worker made from a blob" : controlled ? "a service worker serves the page"
    : typeof Worker === "undefined" ? "no nested workers" : !inflatesRaw() ? "no deflate-raw" : null;
  return ctx.use("download-thread", !why, why);
}

/**
 * Starts the thread on `order` (filesInOrder) once the runtime's files are in.
 * @returns {Map<string, Promise<Array<[string, Uint8Array]>>>} wheel URL -> its files (path in the wheel, bytes)
 */
export function downloadInThread(ctx, net, order) {
  const unpacked = new Map();
  const pending = new Map(); // url -> {resolve, reject}
  for (const { url } of order.flat()) {
    const files = new Promise((resolve, reject) => pending.set(url, { resolve, reject }));
    files.catch(() => undefined); // its install awaits it and reports the failure
    unpacked.set(url, files);
  }
  const failAll = (reason) => {
    for (const [url, { reject }] of pending) {
      net.answered(url);
      net.assetFailed(url, reason);
      reject(new Error(reason));
    }
    pending.clear();
  };
  let thread;
  try {
    thread = new Worker(`${ctx.root}fetcher.js`);
  } catch (e) {
    // Reported: every wheel fails with this reason, named on the error panel.
    failAll(`the download thread (fetcher.js) did not start: ${e.message || e}`);
    return unpacked;
  }
  // The thread is held (this closure) until its last wheel is in: Firefox may end a nested worker whose Worker
  // object was garbage collected while it unpacks.
  unpacked.thread = thread;
  thread.onmessage = ({ data: { url, files, size, status, error } }) => {
    const { resolve, reject } = pending.get(url);
    pending.delete(url);
    net.answered(url);
    if (!pending.size) delete unpacked.thread;
    if (error || status) {
      const reason = error || `HTTP ${status}`;
      net.assetFailed(url, reason);
      reject(new Error(reason));
    } else {
      net.count(url, size);
      net.threadFetched(url);
      resolve(files);
    }
  };
  thread.onerror = (event) => {
    event.preventDefault(); // handled: every wheel still pending fails with this reason
    failAll("the download thread (fetcher.js) could not be loaded");
  };
  net.runtimeIn.then(() => {
    net.asked(...pending.keys()); // one message for every wheel
    thread.postMessage(order);
  });
  return unpacked;
}

/**
 * What loadPackage does with a wheel, for the wheels the thread unpacked: their files written into site-packages,
 * their names in pyodide.loadedPackages. Extension modules are loaded by Python's import when first imported, so
 * the ones a page never imports are never compiled. Every package of the group is installed before a failure is
 * reported, as loadPackage does.
 */
export function installerOfUnpacked(ctx, pyodide, net, lockPackages, unpacked, packageUrl) {
  let sitePackages = null;
  const writeFiles = (files) => {
    const made = new Set();
    for (const [name, data] of files) {
      const path = `${sitePackages}/${name}`;
      const folder = path.slice(0, path.lastIndexOf("/"));
      if (!made.has(folder)) {
        pyodide.FS.mkdirTree(folder);
        made.add(folder);
      }
      pyodide.FS.writeFile(path, data, { canOwn: true }); // the file keeps these bytes: no copy
    }
  };
  return async (names, label) => {
    sitePackages ??= pyodide.runPython("import site; site.getsitepackages()[0]");
    const failures = [];
    for (const name of names) {
      const entry = lockPackages[name];
      try {
        if (!entry) throw new Error(`${pretty(name)} is not in the lock file`);
        writeFiles(await unpacked.get(packageUrl(ctx, entry)));
        pyodide.loadedPackages[name] = "default channel";
      } catch (e) {
        failures.push([name, e]); // the group goes on; the failures are reported below
      }
    }
    pyodide.runPython("import importlib; importlib.invalidate_caches()"); // new folders for the path finders
    if (failures.length) {
      throw installError(net, label, failures.map(([name]) => pretty(name)), String(failures[0][1].message));
    }
  };
}
