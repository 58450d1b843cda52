// The learner's code runs in a worker of its own (worker/learner.js), which the page ends when a run takes longer
// than the time limit: a static host gives no SharedArrayBuffer to interrupt Python with, so stopping means
// terminating. One spare worker is kept booted, so that a Check does not wait for Python to start; each run uses
// a fresh one (learner code may change shared modules) and the next spare boots once the run is over.
import { dispatch, learnerRun, learnerStart, MSG } from "../protocol.js";

export const TIME_LIMIT_MS = 5_000;

/**
 * @param {{manifest: object, newWorker: () => Promise<Worker>, learnerFiles: () => Promise<[object, Transferable[]]>,
 *   info: object}} site what the page lends: how to make a worker.js, the portable file's files
 */
export function learnerPool(site) {
  const stats = (site.info.learner = { boots: [], runs: [] }); // for the tests and the benchmark
  let spare = null;

  function boot() {
    const t0 = performance.now();
    const entry = { worker: null, verdicts: [] };
    entry.ready = (async () => {
      const worker = await site.newWorker();
      entry.worker = worker;
      const [files, transfer] = await site.learnerFiles();
      const ready = new Promise((resolve, reject) => {
        const fromLearner = {
          [MSG.LEARNER_READY]: (msg) => {
            stats.boots.push(Math.round(msg.ms));
            resolve();
          },
          [MSG.VERDICT]: (msg) => entry.verdicts.shift()?.(msg),
          [MSG.ERROR]: (msg) => reject(new Error(`${msg.what}: ${msg.detail}`)),
          [MSG.STAGE]: () => undefined,
          [MSG.PROGRESS]: () => undefined,
          [MSG.STATUS]: () => undefined,
        };
        worker.onmessage = (event) => dispatch(fromLearner, event.data, "the lesson panel (the learner's worker)");
        worker.onerror = (e) => reject(new Error(e.message || "the worker failed"));
      });
      worker.postMessage(learnerStart({ manifest: site.manifest, root: new URL("./", location.href).href,
        fallbacks: [], files }), transfer);
      await ready;
      entry.bootMs = performance.now() - t0;
    })();
    entry.ready.catch(() => undefined); // reported by the run that waits for it
    return entry;
  }

  /** Boots the spare now if there is none (a lesson with a challenge opened). */
  const warm = () => (spare ??= boot());

  /**
   * Runs `code` then `check` (null: a Run); `onWait(seconds)` is called while the run waits for Python to start.
   * @returns {Promise<{verdict: object, waitedMs: number, ms: number}>} a timeout's verdict has status "timeout"
   */
  async function run(code, check, model, onWait) {
    const entry = warm();
    spare = null;
    const t0 = performance.now();
    let waiting = null;
    const timer = setInterval(() => onWait?.((performance.now() - t0) / 1000), 100);
    try {
      await entry.ready;
    } catch (e) { // Python did not start (a failed download): the verdict says so, the next run boots again
      clearInterval(timer);
      entry.worker?.terminate();
      return { verdict: { status: "error", message: `Python could not start for your code: ${e.message}`, stdout: "" },
        waitedMs: performance.now() - t0, ms: 0 };
    }
    clearInterval(timer);
    const waitedMs = performance.now() - t0;
    const started = performance.now();
    const answered = new Promise((resolve) => entry.verdicts.push(resolve));
    const late = new Promise((resolve) => (waiting = setTimeout(resolve, TIME_LIMIT_MS, null)));
    entry.worker.postMessage(learnerRun(code, check, model), model ? [model] : []);
    const msg = await Promise.race([answered, late]);
    clearTimeout(waiting);
    entry.worker.terminate(); // each run gets a fresh interpreter; a run past the limit is stopped here
    const ms = performance.now() - started;
    const verdict = msg ? msg.verdict : { status: "timeout", stdout: "",
      message: `Stopped after ${TIME_LIMIT_MS / 1000} s: your code was still running (an endless loop?).` };
    stats.runs.push({ status: verdict.status, waitedMs: Math.round(waitedMs), ms: Math.round(ms),
      stoppedAt: msg ? null : performance.now() });
    setTimeout(warm, 0); // the next spare boots now that this run is over
    return { verdict, waitedMs, ms };
  }

  return { warm, run, stats };
}
