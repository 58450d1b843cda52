// Optimisation of "start Python", "install the packages" and "import": this build's memory snapshot (snapshot.js),
// an interpreter with every package installed and Panel and the app imported. Feature test: the page allows it
// (Cache Storage, not an opaque origin, no ?snapshot=0) and snapshot.js loads. Fallback: start from the packages
// (and the page has one made for the next visit).
import { answered, NoAnswer } from "./cache-storage.js";
import { IMPORT_MS, startPython } from "./runtime.js";

/**
 * Starts reading this build's snapshot.
 * @returns {{snapshot: object, reading: Promise<object|null>}|null} null: this start makes no use of one
 */
export async function readSnapshot(ctx, allowed, importSnapshot) {
  if (!ctx.use("memory-snapshot", allowed, "none on this page (?snapshot=0, no Cache Storage, an opaque origin)")) {
    return null;
  }
  const snapshot = await importSnapshot(); // bounded (runtime.js importing): without it, the start goes on
  if (!snapshot) {
    ctx.paths["memory-snapshot"] = `off: snapshot.js did not load within ${IMPORT_MS / 1000} s`;
    console.warn("[site] starting from the packages: snapshot.js did not load in time");
    return null;
  }
  const reading = snapshot.load(ctx.root, ctx.cacheName, ctx.manifest.build_id, answered);
  reading.catch(() => undefined); // restore() awaits it and says why it is not used
  return { snapshot, reading };
}

/** Python from the snapshot, or null (and the snapshot deleted) if there is none or it fails. */
export async function restore(ctx, net, saved, loadPyodide, lock) {
  if (!saved) return null;
  const { snapshot, reading } = saved;
  try {
    const data = await reading;
    if (!data) return null;
    const pyodide = await startPython(ctx, net, loadPyodide, lock, snapshot.restoreOptions(data));
    await snapshot.finishRestore(pyodide, data);
    return pyodide;
  } catch (e) {
    if (e instanceof NoAnswer) {
      // The named case: Cache Storage kept silent; the snapshot may be fine, so it stays for the next visit.
      console.warn("[site] starting from the packages:", e.message);
      ctx.paths["memory-snapshot"] = `off: ${e.message}`;
      return null;
    }
    // The named case: a snapshot that does not fit (another build, a damaged entry): start from the packages.
    console.warn("[site] memory snapshot not usable, starting from the packages:", e);
    await answered(snapshot.discard(ctx.root, ctx.cacheName), "deleting the snapshot")
      .catch((d) => console.warn("[site] could not delete it:", d));
    ctx.paths["memory-snapshot"] = `off: not usable (${e?.message || e})`;
    return null;
  }
}
