// Files dropped on the page, for the app: boot.py deliver_files -> playground.inbox.deliver.
import { PY } from "./python-api.js";

/** Hands dropped files ([[relative path, ArrayBuffer], ...]) to the app's Python. */
export async function deliverFiles(namespace, files) {
  const pairs = files.map(([name, buffer]) => [name, new Uint8Array(buffer)]);
  const deliver = namespace.get(PY.DELIVER_FILES);
  let taken;
  try {
    taken = await deliver(pairs);
  } finally {
    deliver.destroy();
  }
  if (taken === undefined || taken === null) {
    console.error(`[site] ${files.length} dropped file(s) not delivered: this build's app has no playground.inbox`);
  } else {
    console.info(`[site] ${files.length} dropped file(s) handed to ${taken} playground(s)`);
  }
}
