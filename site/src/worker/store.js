// The models a learner trained or loaded, kept across visits in IndexedDB ("slm-models"), for the app's Python:
// `await js.slmStore.put(key, bytes, name)` (py/playground/storage.py). Two object stores, so that list() reads no
// model's bytes: "meta" ({key, name, bytes: size, saved: ms, parts?: n}) and "data" (key -> Uint8Array; a model
// larger than PART_BYTES as n parts, partKey(key, i) -> Uint8Array: Chromium refuses a value over ~133 MB, and a
// 124M-parameter model is 500 MB). Where IndexedDB is
// missing or refused (an opaque origin: the portable file, a sandboxed iframe; some private windows) available()
// is false and put() rejects with an Error that says so; list() and get() then answer from `embeddedModels`, the
// models the portable file was saved with ([{key, name, bytes, saved, data: Uint8Array}]).
const MODEL_DB = "slm-models";
export const PART_BYTES = 64 * 2 ** 20;
const partKey = (key, i) => `${key}\u0000${String(i).padStart(4, "0")}`; // sorts after the key, in part order
const partsOf = (key) => IDBKeyRange.bound(`${key}\u0000`, `${key}\u0000\uffff`);

export function modelStore(embeddedModels = [], persistent = true) {
  let opening = null;
  const open = () => (opening ??= new Promise((resolve, reject) => {
    let request;
    try {
      if (!persistent) throw new Error("the portable file keeps no models but those it was saved with");
      request = indexedDB.open(MODEL_DB, 1);
    } catch (e) {
      reject(e); // no indexedDB at all, or an opaque origin (SecurityError)
      return;
    }
    request.onupgradeneeded = () => {
      request.result.createObjectStore("meta", { keyPath: "key" });
      request.result.createObjectStore("data");
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
    request.onblocked = () => reject(new Error("another tab holds an older version of the model store open"));
  }));
  const db = async () => {
    try {
      return await open();
    } catch (e) {
      throw new Error(`This page cannot keep models (no IndexedDB here: ${e?.message || e}). ` +
        "A page opened from a file, a sandboxed frame or a private window has none; download the model instead.");
    }
  };
  // One transaction; resolves once it has committed with what `work(tx)` returned: a request's result, or the
  // value of a function called then.
  const run = async (stores, mode, work) => {
    const tx = (await db()).transaction(stores, mode);
    const committed = new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error || new Error("the model store's transaction was aborted"));
    });
    committed.catch(() => undefined); // awaited below
    let got;
    try {
      got = work(tx);
    } catch (e) {
      // A request refused at once ends the transaction, and the next call on it throws: report why it ended.
      try {
        tx.abort();
      } catch {
        // already ended
      }
      await committed.catch((why) => {
        throw why || e;
      });
      throw e;
    }
    await committed;
    return typeof got === "function" ? got() : got?.result;
  };
  const fromEmbedded = (key) => embeddedModels.find((m) => m.key === key);
  let usable = null;
  return {
    available() {
      usable ??= open().then(() => true, (e) => {
        console.info("[site] no model store here:", e?.message || e); // the named case: IndexedDB refused
        return false;
      });
      return usable;
    },
    async list() {
      const embedded = embeddedModels.map(({ key, name, bytes, saved }) => ({ key, name, bytes, saved }));
      if (!(await this.available())) return embedded;
      const stored = await run(["meta"], "readonly", (tx) => tx.objectStore("meta").getAll());
      return [...embedded.filter((m) => !stored.some((s) => s.key === m.key)), ...stored];
    },
    async get(key) {
      const parts = await this.getParts(key);
      return parts && (parts.length === 1 ? parts[0] : asBytes(parts));
    },
    // The model's bytes as stored, one or more Uint8Arrays in order (Python copies each into its heap: no joined
    // copy of a 500 MB model in JS), or null.
    async getParts(key) {
      if (await this.available()) {
        const data = await run(["meta", "data"], "readonly", (tx) => {
          const store = tx.objectStore("data");
          const whole = store.get(key);
          const parts = [];
          const meta = tx.objectStore("meta").get(key);
          meta.onsuccess = () => {
            for (let i = 0; i < (meta.result?.parts || 0); i++) parts.push(store.get(partKey(key, i)));
          };
          return () => (whole.result ? [whole.result] : parts.length ? parts.map((r) => r.result) : undefined);
        });
        if (data) return data;
      }
      const model = fromEmbedded(key);
      return model ? [model.data.slice()] : null;
    },
    async put(key, bytes, name) {
      const parts = asParts(bytes); // copied now: a view of Python's memory may move once this awaits
      const size = parts.reduce((n, part) => n + part.byteLength, 0);
      const meta = { key: String(key), name: String(name ?? key), bytes: size, saved: Date.now() };
      if (parts.length > 1) meta.parts = parts.length;
      await run(["meta", "data"], "readwrite", (tx) => {
        const store = tx.objectStore("data");
        store.delete(partsOf(meta.key)); // an earlier model of this name may have had more parts
        if (parts.length > 1) {
          store.delete(meta.key);
          parts.forEach((part, i) => store.put(part, partKey(meta.key, i)));
        } else {
          store.put(parts[0], meta.key);
        }
        return tx.objectStore("meta").put(meta);
      });
    },
    async remove(key) {
      await run(["meta", "data"], "readwrite", (tx) => {
        tx.objectStore("data").delete(key);
        tx.objectStore("data").delete(partsOf(key));
        return tx.objectStore("meta").delete(key);
      });
    },
  };
}

// A copy of the bytes given as a Uint8Array (or another view, an ArrayBuffer, a PyProxy of a Python buffer, or an
// array of views joined: Python writes a model in chunks, so that it never sits whole in the wasm heap).
export function asBytes(value) {
  if (Array.isArray(value) && value.every((chunk) => ArrayBuffer.isView(chunk))) return asParts(value, Infinity)[0];
  if (value instanceof ArrayBuffer) return new Uint8Array(value.slice(0));
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength));
  if (typeof value?.getBuffer === "function") {
    const buffer = value.getBuffer("u8");
    try {
      return buffer.data.slice();
    } finally {
      buffer.release();
    }
  }
  throw new TypeError(`slmStore.put: the model's bytes must be a Uint8Array, not ${Object.prototype.toString.call(value)}`);
}

/** The bytes (as asBytes takes them) copied into parts of at most `size` bytes: one part, if they fit in it. */
export function asParts(value, size = PART_BYTES) {
  const joined = Array.isArray(value) && value.every((chunk) => ArrayBuffer.isView(chunk));
  const chunks = joined ? value : [asBytes(value)];
  const total = chunks.reduce((n, chunk) => n + chunk.byteLength, 0);
  if (!joined && total <= size) return chunks; // asBytes' copy is the one part
  const parts = [];
  for (let left = total; left > 0 || !parts.length; left -= size) parts.push(new Uint8Array(Math.min(size, left)));
  let at = 0;
  for (const chunk of chunks) {
    let bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (bytes.byteLength) {
      const part = parts[Math.floor(at / size)];
      const offset = at % size;
      const n = Math.min(bytes.byteLength, part.byteLength - offset);
      part.set(bytes.subarray(0, n), offset);
      bytes = bytes.subarray(n);
      at += n;
    }
  }
  return parts;
}

/** The store's models with their bytes ([{key, name, bytes, saved, data: Uint8Array}]), for portable.js. */
export async function modelsWithBytes(store) {
  const models = [];
  for (const meta of await store.list()) {
    const data = await store.get(meta.key);
    if (data) models.push({ ...meta, data });
  }
  return models;
}
