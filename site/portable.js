// The portable edition: the whole site in one HTML file that runs from a file:// URL (no server, no network).
//
// assemble() is the one writer of that format. The build runs it under Node on the files it has just written
// (py/sitebuild/node/portable.mjs); the hosted page runs it in the browser on the files its visit loaded ("Save
// for offline use", loader.js). loader.js reads the format when the page it runs in is such a file.
//
// The format: index.html's shell with the stylesheet and loader.js inlined, a Content-Security-Policy that allows
// exactly that inline script (by hash) and blob: URLs (what the page makes of the embedded files), an index (the
// page's one <script type="application/json">: the manifest, and each file's path, size, sha256, encoding and the
// id of the element holding it) and one <script type="application/octet-stream"> per file with its bytes in
// base64, gzip-compressed where that pays (wasm and text; the wheels and the stdlib are zips already).

// Not in the file: the hosted pages, what only a server with Cache Storage uses (service worker, snapshots), and the
// wheels' download thread (the file's worker is made from a blob, and has the wheels' bytes already).
const LEFT_OUT = new Set(["index.html", "embed.html", "sw.js", "snapshot.js", "portable.js", "fetcher.js"]);
const COMPRESSED = /\.(wasm|m?js|json|css|py|svg)$/;

const hex = (bytes) => [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");

async function sha256(bytes) {
  return hex(await crypto.subtle.digest("SHA-256", bytes));
}

async function gzip(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function toBase64(bytes) {
  if (bytes.toBase64) return bytes.toBase64();
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

// JSON that can sit inside a <script> element.
const scriptJson = (value) => JSON.stringify(value).replaceAll("<", "\\u003c");

function inlineScript(text, name) {
  if (/<\/script/i.test(text)) throw new Error(`${name} cannot be inlined: it contains "</script"`);
  return text;
}

// The site's files by path (as the manifest names them), each read with `read(pathOrUrl)` -> Uint8Array.
// Packages the hosted site fetches from the Pyodide CDN (manifest.remote) are embedded under build/wheels/ and
// the lock file is rewritten to point there. `models`: the models of the visitor's store (the worker's slmStore,
// [{key, name, bytes, saved, data: Uint8Array}]), embedded as they are; the file's store lists them. `lessons`: the
// lesson files open on the page ([{name, source, text}], the built-in ones are in the app), the first the one shown.
export async function assemble({ manifest, read, models = [], lessons = [] }) {
  const decoder = new TextDecoder();
  const lock = JSON.parse(decoder.decode(await read("build/pyodide-lock.json")));
  // The gzip copies too: the file embeds each file once, compressed where that pays.
  const copies = new Set(Object.values(manifest.site.gzip_copies));
  const files = Object.keys(manifest.files).filter(
    (path) => !LEFT_OUT.has(path) && !copies.has(path) && path !== manifest.site.manifest && path !== manifest.site.facts,
  );
  const sources = Object.fromEntries(files.map((path) => [path, path]));
  const portableFiles = Object.fromEntries(files.map((path) => [path, manifest.files[path]]));
  for (const [name, remote] of Object.entries(manifest.remote)) {
    const fileName = remote.url.split("/").pop();
    const path = `build/wheels/${fileName}`;
    lock.packages[name].file_name = `wheels/${fileName}`;
    sources[path] = remote.url;
    portableFiles[path] = { size: null, stage: remote.stage };
  }
  const contents = {};
  await Promise.all(Object.entries(sources).map(async ([path, source]) => (contents[path] = await read(source))));
  contents["build/pyodide-lock.json"] = new TextEncoder().encode(JSON.stringify(lock, null, 1));

  const parts = [];
  const blocks = [];
  for (const path of Object.keys(sources).sort()) {
    const bytes = contents[path];
    portableFiles[path] = { ...portableFiles[path], size: bytes.length };
    const encoding = COMPRESSED.test(path) ? "gzip" : "identity";
    const stored = encoding === "gzip" ? await gzip(bytes) : bytes;
    const id = `part-${parts.length}`;
    parts.push({ id, path, size: bytes.length, sha256: await sha256(bytes), encoding });
    blocks.push(`<script type="application/octet-stream" id="${id}">${toBase64(stored)}</script>`);
  }
  const modelIndex = [];
  for (const model of models) {
    const id = `model-${modelIndex.length}`;
    const data = model.data;
    modelIndex.push({ id, key: model.key, name: model.name, bytes: data.length, saved: model.saved, sha256: await sha256(data) });
    blocks.push(`<script type="application/octet-stream" id="${id}">${toBase64(data)}</script>`);
  }
  const index = { manifest: { ...manifest, remote: {}, files: portableFiles }, parts, models: modelIndex, lessons };

  const template = decoder.decode(await read("index.html"));
  const style = decoder.decode(contents["style.css"]);
  const loader = inlineScript(decoder.decode(contents["loader.js"]), "loader.js");
  const csp = [
    "default-src 'none'",
    `script-src 'sha256-${await base64Digest(loader)}' blob: 'wasm-unsafe-eval'`,
    "style-src 'unsafe-inline' blob:",
    "img-src data: blob:",
    "font-src data: blob:",
    "connect-src blob: data:",
    "worker-src blob:",
    "object-src 'none'",
    "base-uri 'none'",
  ].join("; ");
  const page = template
    .replace(/<meta http-equiv="Content-Security-Policy" content="[^"]*">/, `<meta http-equiv="Content-Security-Policy" content="${csp}">`)
    .replace(/<link rel="stylesheet" href="style\.css">/, () => `<style>${style}</style>`)
    .replace(/<script type="module" src="loader\.js"><\/script>/, () => `<script type="module">${loader}</script>`)
    .replace(
      /<\/body>/,
      () => `<script type="application/json">${scriptJson(index)}</script>\n${blocks.join("\n")}\n</body>`,
    );
  for (const [what, found] of [["CSP", page.includes(csp)], ["loader", page.includes(loader)], ["index", page.includes(blocks[0])]]) {
    if (!found) throw new Error(`index.html does not have the shape the portable file needs (${what})`);
  }
  return page;
}

async function base64Digest(text) {
  return toBase64(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text))));
}
