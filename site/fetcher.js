// The wheels' download thread, started by the app worker (worker/download-thread.js, downloadInThread): it downloads
// each group of wheels once the group before it is in, and unpacks each wheel as it arrives, on its own thread: the
// app worker's thread, busy with Python, then only writes the files (Pyodide's loadPackage unpacked them in Python
// there: 0.4-0.5 s of a cold start's critical path). Message in: [[{url, integrity}, ...], ...] (groups, in order).
// Out, one per wheel: {url, files: [[path in the wheel, Uint8Array], ...], size} (size: the wheel's bytes), {url,
// status} (an HTTP error) or {url, error} (no response, the bytes did not match their sha256, or not a zip this file
// can read).
self.onmessage = async ({ data: groups }) => {
  for (const group of groups) {
    await Promise.all(group.map(({ url, integrity }) => download(url, integrity)));
  }
  self.close();
};

async function download(url, integrity) {
  let buffer;
  try {
    const resp = await fetch(url, { integrity });
    if (!resp.ok) {
      self.postMessage({ url, status: resp.status });
      return;
    }
    buffer = await resp.arrayBuffer();
  } catch (e) {
    self.postMessage({ url, error: `network error (${e.message || e})` });
    return;
  }
  try {
    const files = await unzip(buffer);
    self.postMessage({ url, files, size: buffer.byteLength }, files.map(([, data]) => data.buffer));
  } catch (e) {
    self.postMessage({ url, error: `not a wheel this page can unpack (${e.message || e})` });
  }
}

// A wheel is a zip file. Its central directory, at the end, lists each member: name, compression, compressed size
// and where its local header is; the member's bytes follow that header. Members are stored (method 0) or deflated
// (8), inflated by the browser's own DecompressionStream. The wheel as a whole was checked against its sha256, so
// the members' CRCs are not checked again. Folders and names that would leave site-packages ("..", a leading "/")
// are skipped, as Pyodide's unpacker skips them. A wheel this small needs no ZIP64: one that uses it is refused.
async function unzip(buffer) {
  const bytes = new Uint8Array(buffer);
  const view = new DataView(buffer);
  let end = bytes.length - 22; // the end-of-central-directory record, before a comment of any length
  while (end >= 0 && view.getUint32(end, true) !== 0x06054b50) end -= 1;
  if (end < 0) throw new Error("not a zip file");
  const count = view.getUint16(end + 10, true);
  let at = view.getUint32(end + 16, true);
  const decoder = new TextDecoder();
  const members = [];
  for (let i = 0; i < count; i++) {
    if (view.getUint32(at, true) !== 0x02014b50) throw new Error("damaged zip central directory");
    const method = view.getUint16(at + 10, true);
    const size = view.getUint32(at + 20, true);
    const nameLength = view.getUint16(at + 28, true);
    const local = view.getUint32(at + 42, true);
    const name = decoder.decode(bytes.subarray(at + 46, at + 46 + nameLength));
    at += 46 + nameLength + view.getUint16(at + 30, true) + view.getUint16(at + 32, true);
    if (size === 0xffffffff || local === 0xffffffff) throw new Error(`${name}: ZIP64 is not supported`);
    if (name.endsWith("/") || name.startsWith("/") || name.split("/").includes("..")) continue;
    if (method !== 0 && method !== 8) throw new Error(`${name}: compression method ${method} is not supported`);
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    members.push([name, method, bytes.subarray(start, start + size)]);
  }
  return Promise.all(
    members.map(async ([name, method, raw]) => {
      if (method === 0) return [name, raw.slice()]; // a copy: each member's buffer is handed over on its own
      const inflater = new DecompressionStream("deflate-raw");
      const writer = inflater.writable.getWriter();
      writer.write(raw).catch(() => {}); // a failure shows in the readable side, read below
      writer.close().catch(() => {}); // a failure shows in the readable side too
      return [name, new Uint8Array(await new Response(inflater.readable).arrayBuffer())];
    }),
  );
}
