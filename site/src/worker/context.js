// What every stage of a start-up reads: where the site is, its manifest, how to talk to the page, and which
// optimisations it may use. Made once per start ('start' or 'make-snapshot') and passed to each stage.
import { SiteError, error, stage as stageMessage } from "../protocol.js";

export const post = (msg, transfer) => self.postMessage(msg, transfer || []);

/**
 * @param {object} manifest build/manifest.json
 * @param {string} root the site's URL
 * @param {string[]} fallbacks optimisations to leave out (the page's ?fallback=): their plain path is taken
 */
export function context(manifest, root, fallbacks = []) {
  const forced = new Set(fallbacks);
  const ctx = {
    root,
    manifest,
    labels: manifest.site.stages, // stage key -> its label on the progress screen
    cacheName: manifest.site.cache_prefix + manifest.build_id, // this build's cache (sw.js), with the snapshot
    paths: {}, // optimisation -> "on" | "off: why": reported to the page with 'render'
    loaded: () => [], // the packages installed so far (set once Python has started)
    fetched: () => [], // the URLs this worker downloaded (set by the network stage)
    /** Whether to use an optimisation: its feature test passed and the page did not force its fallback. */
    use(name, available, reason) {
      const on = available && !forced.has(name) && !forced.has("all");
      ctx.paths[name] = on ? "on" : `off: ${available ? "forced" : reason}`;
      return on;
    },
    stage(key) {
      post(stageMessage(key));
    },
    /** Tells the page that the start-up failed (the page shows its error panel with Retry). */
    report(e) {
      const err = e instanceof SiteError ? e : new SiteError("Starting the app", String(e?.stack || e));
      post(error(err, ctx.loaded(), ctx.fetched(), ctx.paths));
    },
  };
  return ctx;
}
