// Files dropped on the page, for the app (boot.py deliver_files -> playground.inbox.deliver), and the model store's
// contents for the portable file.

/** Hands dropped files ([[relative path, ArrayBuffer], ...]) to the app's Python. */
export async function deliverFiles(namespace, files) {
  const pairs = files.map(([name, buffer]) => [name, new Uint8Array(buffer)]);
  const deliver = namespace.get("deliver_files");
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

/** The store's models with their bytes ([{key, name, bytes, saved, data: Uint8Array}]), for portable.js. */
export async function exportModels(store) {
  const models = [];
  for (const meta of await store.list()) {
    const data = await store.get(meta.key);
    if (data) models.push({ ...meta, data });
  }
  return models;
}
