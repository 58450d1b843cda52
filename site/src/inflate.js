// A gzip copy's content (sitebuild/assemble.py: the wasm's and the page's scripts' copies), for the app worker, the
// page and the service worker alike.

/**
 * The body of `resp`, a gzip copy, inflated: read whole, then inflated from memory (piping the network stream
 * through the inflater corrupted it in Firefox ESR 140's module workers: "incorrect header check"). A host that
 * sends the copy with Content-Encoding: gzip has had the browser inflate it already: its body as it is. A copy cut
 * off or damaged rejects.
 * @param {Response} resp an ok response
 * @returns {Promise<ArrayBuffer|ReadableStream>} for `new Response(body, ...)`
 */
export async function inflatedBody(resp) {
  if (resp.headers.get("Content-Encoding")) return resp.body;
  const gz = new Blob([await resp.arrayBuffer()]);
  return new Response(gz.stream().pipeThrough(new DecompressionStream("gzip"))).arrayBuffer();
}
