// The stage "install the packages": the manifest's packages in the order prelude.py imports them
// (manifest.import_groups, sitebuild/assemble.py IMPORT_GROUPS), then the "app" stage's wheels (the app's own,
// and the packages only the app's code needs), installed a group at a time while prelude.py imports what the
// groups before have installed.
import { SiteError } from "../protocol.js";
import { pretty } from "./error-labels.js";

export const packageUrl = (ctx, entry) => new URL(entry.file_name, `${ctx.root}build/`).href;

/** The lock's sha256 (hex) as a fetch integrity value, as loadPackage writes it. */
export const integrity = (hex) => `sha256-${btoa(String.fromCharCode(...hex.match(/../g).map((b) => parseInt(b, 16))))}`;

/**
 * The manifest's packages in loading order.
 * @returns {{groups: string[][], app: string[]}} groups: the import groups' packages, then the packages stage's
 *   others; app: the "app" stage's
 */
export function packagesInOrder(ctx, lockPackages) {
  const grouped = ctx.manifest.import_groups.map((g) => g.packages);
  const app = [];
  const rest = [];
  for (const name of ctx.manifest.packages) {
    const entry = lockPackages[name];
    const rel = entry ? packageUrl(ctx, entry).slice(ctx.root.length) : null;
    if (entry && ctx.manifest.files[rel]?.stage === "app") app.push(name);
    else if (!grouped.some((g) => g.includes(name))) rest.push(name);
  }
  return { groups: [...grouped, rest], app };
}

/** Each group's files, in order: [[{url, integrity}, ...], ...] (a name not in the lock: loadPackage names it). */
export function filesInOrder(ctx, lockPackages) {
  const { groups, app } = packagesInOrder(ctx, lockPackages);
  return [...groups, app].map((group) => group.filter((name) => lockPackages[name]).map((name) => ({
    url: packageUrl(ctx, lockPackages[name]),
    integrity: integrity(lockPackages[name].sha256),
  })));
}

/**
 * The groups installed one after the other (loadPackage takes one call at a time anyway), each whatever became of
 * the one before: a promise for each group, settled once it is in.
 * @param {(names: string[], label: string) => Promise<void>} install loadPackages, or the download thread's installer
 */
export function installInOrder(groups, label, install) {
  let after = Promise.resolve();
  return groups.map((names) => {
    const installed = after.then(() => install(names, label));
    after = installed.catch(() => undefined); // the next group goes on; this failure is reported where awaited
    return installed;
  });
}

/** The error of an install that failed: what could not be loaded, and why (the failed downloads, else `detail`). */
export function installError(net, label, culprits, detail) {
  const assets = net.failedAssets((u) => u.endsWith(".whl"));
  return new SiteError(`${label}: could not load ${culprits.join(", ")}`, assets || detail, "packages");
}

/** The plain installer: Pyodide's loadPackage, which downloads (or takes the early responses) and unpacks. */
export function loadPackagesWith(pyodide, net) {
  return async (names, label) => {
    const errors = [];
    let loaded;
    try {
      loaded = await pyodide.loadPackage(names, {
        messageCallback: () => {},
        errorCallback: (m) => errors.push(m),
        checkIntegrity: true,
      });
    } catch (e) {
      errors.push(String(e.message || e)); // reported below, with what did load
    }
    const got = new Set((loaded || []).map((p) => p.name));
    const missing = names.filter((n) => !got.has(n));
    if (missing.length || errors.length) {
      // A failed download makes loadPackage give up on every package: name the ones whose files failed.
      const culprits = net.failedWheels();
      throw installError(net, label, culprits.length ? culprits : missing.map(pretty),
        errors.join("\n") || "loadPackage did not load them");
    }
  };
}
