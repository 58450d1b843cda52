// Memory snapshot of an interpreter that has installed every package and imported Panel and the app, so that a
// later visit skips Python start-up, package installation and `import panel` (docs/site.md, "Memory snapshot").
// Made once per build, by a second worker started after the page is ready (`make`), kept in Cache Storage next
// to the service worker's copies of the same build (so a rebuild drops it), read back by the app worker
// (`load`, `restoreOptions`, `finishRestore`).
//
// Pyodide 0.29's snapshot (the experimental loadPyodide({_makeSnapshot}) / makeMemorySnapshot() /
// loadPyodide({_loadSnapshot})) holds the wasm memory only. What a restored interpreter also needs is recorded
// beside it:
// - the files under site-packages (package data such as Panel's templates, modules imported later): written
//   back into the in-memory file system;
// - the extension modules (NumPy's .so side modules): instantiated again, in the same order, at the memory base
//   and table base they had (the function table then matches the pointers in memory), after which each one's
//   data segment is copied back from the snapshot, since instantiating re-initialises it;
// - the dlopen handles Python holds, and pyodide.loadedPackages.
// Any mismatch throws; the app worker then deletes the snapshot and starts the usual way.

const FORMAT = 1; // bump when what is stored changes
const KEYS = { heap: "snapshot/heap.bin", files: "snapshot/files.bin", meta: "snapshot/meta.json" };

const cacheKey = (root, name) => `${root}build/${KEYS[name]}`;

// ------------------------------------------------------------------------------------------- making

// Records the memory and table base of every side module as it is instantiated (Emscripten hands them to
// the module as the `__memory_base` / `__table_base` imports). The main module's imports have no such entry.
function recordSideModules() {
  const bases = [];
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = function (binary, imports, ...rest) {
    const memoryBase = imports?.env?.__memory_base;
    if (typeof memoryBase === "number") bases.push({ memoryBase, tableBase: imports.env.__table_base });
    return instantiate.call(this, binary, imports, ...rest);
  };
  return { bases, stop: () => (WebAssembly.instantiate = instantiate) };
}

// With _makeSnapshot, Pyodide wraps the globals in a recording proxy and reads properties with the proxy as
// receiver, which makes the worker's own getters (crossOriginIsolated, read by pyodide_http) and methods throw
// "Illegal invocation". Read them on the real global object instead; Pyodide still records the path.
function globalsForSnapshot(scope) {
  return new Proxy(scope, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      const method = typeof value === "function" && typeof prop === "string" && /^[a-z]/.test(prop);
      return method ? value.bind(target) : value;
    },
  });
}

export function makeOptions() {
  const recorder = recordSideModules();
  return { recorder, options: { _makeSnapshot: true, jsglobals: globalsForSnapshot(self) } };
}

// Every regular file under `dir`, as [path, bytes].
function listFiles(FS, dir, out = []) {
  for (const name of FS.readdir(dir)) {
    if (name === "." || name === "..") continue;
    const path = `${dir}/${name}`;
    const mode = FS.stat(path).mode;
    if (FS.isDir(mode)) listFiles(FS, path, out);
    else if (FS.isFile(mode)) out.push([path, FS.readFile(path)]);
  }
  return out;
}

function packFiles(files) {
  const index = [];
  let size = 0;
  for (const [path, data] of files) {
    index.push([path, size, data.length]);
    size += data.length;
  }
  const blob = new Uint8Array(size);
  files.forEach(([, data], i) => blob.set(data, index[i][1]));
  return { index, blob };
}

// The .pyc files of the modules in sys.modules (legacy .pyc beside nothing, or __pycache__ next to a source).
const IMPORTED_BYTECODE = `
import sys
specs = [getattr(module, "__spec__", None) for module in list(sys.modules.values())]
[path for spec in specs if spec is not None for path in (spec.origin, spec.cached)
 if isinstance(path, str) and path.endswith(".pyc")]
`;

// A JS object Python holds that has no path from the globals: only the converter panel.io.pyodide makes with
// pyodide.code.run_js. It is a self-contained arrow function, so its source recreates it.
function serialize(obj) {
  const src = typeof obj === "function" ? String(obj) : "";
  if (src.startsWith("(entries) =>")) return { source: src };
  throw new Error(`cannot snapshot a JS object Python holds: ${typeof obj} ${src.slice(0, 60)}`);
}

function deserialize(entry) {
  return (0, eval)(`(${entry.source})`);
}

// Takes the snapshot of `pyodide` (loaded with makeOptions()) and stores it for this build.
export async function make(pyodide, recorder, root, cacheName, buildId) {
  recorder.stop();
  const M = pyodide._module;
  const libs = Object.entries(M.LDSO.loadedLibsByName)
    .filter(([name, dso]) => name.startsWith("/") && dso.exports)
    .map(([name, dso]) => ({ name, global: dso.global }));
  if (libs.length !== recorder.bases.length) throw new Error("side modules and their bases do not match");
  const handles = Object.fromEntries(
    Object.entries(M.LDSO.loadedLibsByHandle).filter(([h]) => h !== "0").map(([h, dso]) => [h, dso.name]),
  );
  // A failed `from js import document` (panel.io.pyodide, in a worker) leaves an unused reference to
  // `undefined` behind, which the snapshot cannot hold: clear it.
  for (let i = 0; ; i++) {
    let value;
    try {
      value = M.__hiwire_get(i);
    } catch {
      break; // past the last slot of the table: the walk is done
    }
    if (value === undefined) M.__hiwire_set(i, null);
  }
  // Pyodide expects an empty package registry in a snapshot; the restore fills it again.
  const packages = { ...pyodide.loadedPackages };
  for (const name of Object.keys(packages)) delete pyodide.loadedPackages[name];
  let heap;
  try {
    heap = pyodide.makeMemorySnapshot({ serializer: serialize });
  } finally {
    Object.assign(pyodide.loadedPackages, packages);
  }
  // The bytecode of every module Python has imported is in the memory already: only the other files are kept
  // (package data, the modules imported later): 7 of the 14 MB under site-packages, read back on each restore.
  const inMemory = pyodide.runPython(IMPORTED_BYTECODE);
  const imported = new Set(inMemory.toJs());
  inMemory.destroy();
  const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]"); // as worker.js installs there
  const { index, blob } = packFiles(listFiles(M.FS, sitePackages).filter(([path]) => !imported.has(path)));
  const meta = { format: FORMAT, build: buildId, libs: libs.map((l, i) => ({ ...l, ...recorder.bases[i] })),
    handles, packages, files: index };
  // Three entries, one id: another tab saving its own snapshot at the same time must not mix its parts in.
  const headers = { "x-snapshot": crypto.randomUUID() };
  meta.id = headers["x-snapshot"];
  const cache = await caches.open(cacheName);
  await cache.put(cacheKey(root, "heap"), new Response(heap, { headers }));
  await cache.put(cacheKey(root, "files"), new Response(blob, { headers }));
  await cache.put(cacheKey(root, "meta"), new Response(JSON.stringify(meta), { headers }));
  return heap.length + blob.length;
}

// ---------------------------------------------------------------------------------------- restoring

// The stored snapshot of this build, null if there is none; throws if what is stored does not fit together.
// `answered` bounds the wait for Cache Storage's lookup (worker/cache-storage.js), not the reading of the bytes.
export async function load(root, cacheName, buildId, answered = (lookup) => lookup) {
  if (!self.caches) return null;
  const lookup = caches.open(cacheName)
    .then((cache) => Promise.all(["heap", "files", "meta"].map((k) => cache.match(cacheKey(root, k)))));
  const [heap, files, meta] = await answered(lookup, "the memory snapshot");
  if (!heap || !files || !meta) return null;
  const id = meta.headers.get("x-snapshot");
  if (!id || heap.headers.get("x-snapshot") !== id || files.headers.get("x-snapshot") !== id) {
    throw new Error("the snapshot's parts come from different saves");
  }
  const saved = { meta: await meta.json(), heap: heap.arrayBuffer(), files: files.arrayBuffer() };
  if (saved.meta.format !== FORMAT || saved.meta.build !== buildId) throw new Error("snapshot of another build");
  saved.heap = new Uint8Array(await saved.heap);
  saved.files = new Uint8Array(await saved.files);
  return saved;
}

export async function discard(root, cacheName) {
  if (!self.caches) return;
  const cache = await caches.open(cacheName);
  await Promise.all(Object.keys(KEYS).map((k) => cache.delete(cacheKey(root, k))));
}

export function restoreOptions(saved) {
  return { _loadSnapshot: saved.heap, _snapshotDeserializer: deserialize };
}

// The wasm memory of a side module: its data segment size, from the dylink.0 section that leads the binary.
export function dataSize(binary) {
  let at = 8;
  const leb = () => {
    let value = 0;
    let shift = 0;
    let byte;
    do {
      byte = binary[at++];
      value += (byte & 127) * 2 ** shift;
      shift += 7;
    } while (byte & 128);
    return value;
  };
  if (binary[at++] !== 0) throw new Error("side module without a dylink.0 section");
  const sectionSize = leb();
  const end = at + sectionSize;
  const nameLength = leb();
  at += nameLength; // "dylink.0"
  while (at < end) {
    const kind = binary[at++];
    const size = leb();
    if (kind === 1) return leb(); // WASM_DYLINK_MEM_INFO: memory size first
    at += size;
  }
  return 0;
}

export async function finishRestore(pyodide, saved) {
  const M = pyodide._module;
  const { meta, files, heap } = saved;
  for (const [path, start, length] of meta.files) {
    M.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    M.FS.writeFile(path, files.subarray(start, start + length));
  }
  const heapStart = new Uint32Array(heap.buffer, heap.byteOffset, 2)[1]; // Pyodide's header: offset of memory
  // Emscripten gives a side module fresh memory and relocates its exports (and the GOT entries of its own
  // data symbols) against that; the module must instead sit where it was: hand it the recorded
  // `__memory_base`, then move the GOT entries it imported that point into the fresh block.
  let next = null;
  let placed = null;
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = function (binary, imports, ...rest) {
    if (next && typeof imports?.env?.__memory_base === "number") {
      const base = next.memoryBase;
      placed = { fresh: imports.env.__memory_base, got: [] };
      const env = new Proxy(imports.env, {
        get: (target, prop, receiver) => (prop === "__memory_base" ? base : Reflect.get(target, prop, receiver)),
      });
      const got = new Proxy(imports["GOT.mem"], {
        get: (target, prop, receiver) => {
          const entry = Reflect.get(target, prop, receiver);
          placed.got.push(entry);
          return entry;
        },
      });
      imports = { ...imports, env, wasi_snapshot_preview1: env, "GOT.mem": got };
    }
    return instantiate.call(this, binary, imports, ...rest);
  };
  try {
    for (const lib of meta.libs) {
      if (M.wasmTable.length !== lib.tableBase) {
        throw new Error(`function table at ${M.wasmTable.length}, ${lib.name} had ${lib.tableBase}`);
      }
      next = lib;
      placed = null;
      const fs = { findObject: (p, d) => M.FS.findObject(p, d), readFile: (p) => M.FS.readFile(p) };
      await M.loadDynamicLibrary(lib.name, { loadAsync: true, nodelete: true, allowUndefined: true,
        global: lib.global, fs }, lib.global ? undefined : {});
      next = null;
      if (!placed) throw new Error(`${lib.name} was not instantiated`);
      const size = dataSize(M.FS.readFile(lib.name));
      for (const entry of placed.got) {
        if (entry.value >= placed.fresh && entry.value < placed.fresh + size) {
          entry.value += lib.memoryBase - placed.fresh;
        }
      }
      const start = heapStart + lib.memoryBase;
      M.HEAP8.set(heap.subarray(start, start + size), lib.memoryBase);
    }
  } finally {
    WebAssembly.instantiate = instantiate;
  }
  for (const [handle, name] of Object.entries(meta.handles)) {
    M.LDSO.loadedLibsByHandle[handle] = M.LDSO.loadedLibsByName[name];
  }
  Object.assign(pyodide.loadedPackages, meta.packages);
  // Pyodide keeps the options it was loaded with: drop the snapshot's ~50 MB, copied into the wasm memory by now.
  pyodide._api.config._loadSnapshot = null;
}
