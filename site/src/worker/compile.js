// Optimisation of "start Python": Chromium keeps a wasm module's compiled code beside the response it was compiled
// from, once V8 signals that enough of it is optimized, and a later compile of that response reads it. A first
// visit's app worker compiles the gzip copy's stream (a Response without a URL: nothing is written), and V8 would
// hand the snapshot worker that same module, whose code is written nowhere either. So every compile but the copy's
// passes a compile option the module does not use (JS string builtins: it imports none): the snapshot worker then
// compiles a module of its own, whose code is written beside the cached wasm, and the next visit compiles with the
// same option, which that code must match. Feature test: none needed, engines without the option ignore it.
// Fallback: no option.
import { SiteError } from "../protocol.js";

/** Wraps WebAssembly.instantiateStreaming for this start; `net.servedCopy` tells a compile of the gzip copy. */
export function compileOptions(ctx, net) {
  const withOption = ctx.use("compile-options", true, "");
  const instantiateStreaming = WebAssembly.instantiateStreaming;
  WebAssembly.instantiateStreaming = async (source, imports) => {
    const response = await source; // Pyodide passes the promise of its fetch()
    const options = withOption && !net.servedCopy ? { builtins: ["js-string"] } : undefined;
    try {
      return await instantiateStreaming(response, imports, options);
    } catch (e) {
      // Pyodide only logs this and then waits forever: the page must hear of it.
      ctx.report(new SiteError(`${ctx.labels.runtime}: could not compile the WebAssembly runtime`,
        String(e.message || e), "runtime"));
      throw e;
    }
  };
}
