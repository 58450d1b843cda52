// The wheels' download thread, started by worker.js (fetchInThread): it downloads each group of files once the
// group before it is in, reads each file whole as it arrives (its own thread is free to, while the app worker's runs
// Python), and hands it over as one ArrayBuffer. Message in: [[{url, integrity}, ...], ...] (groups, in order). Out,
// one per file: {url, buffer, type}, {url, status, statusText} (an HTTP error) or {url, error} (no response, or
// the bytes did not match their sha256).
self.onmessage = async ({ data: groups }) => {
  for (const group of groups) {
    await Promise.all(group.map(({ url, integrity }) => download(url, integrity)));
  }
  self.close();
};

async function download(url, integrity) {
  try {
    const resp = await fetch(url, { integrity });
    if (!resp.ok) {
      self.postMessage({ url, status: resp.status, statusText: resp.statusText });
      return;
    }
    const buffer = await resp.arrayBuffer();
    self.postMessage({ url, buffer, type: resp.headers.get("Content-Type") }, [buffer]);
  } catch (e) {
    self.postMessage({ url, error: String(e.message || e) });
  }
}
