// slm's matrix products through a SIMD kernel (gemm.wat, built into build/gemm.wasm): Pyodide's NumPy has no BLAS
// and no SIMD, and the Train view's steps spend half their time in those products. Optimisation "simd-products";
// feature test: this engine validates the module (WebAssembly SIMD). Plain path: slm.matmul's einsum.

/** The kernel's download, begun at once: its bytes, or null when it is not to be used (ctx.paths says why). */
export function fetchKernel(ctx) {
  // Decided here, before any await, so that every report of ctx.paths has it; the bytes may still turn it off.
  if (!ctx.use("simd-products", typeof WebAssembly.validate === "function", "no WebAssembly.validate")) {
    return Promise.resolve(null);
  }
  const file = ctx.manifest.site.gemm;
  return fetch(ctx.root + file)
    .then(async (resp) => {
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      const bytes = new Uint8Array(await resp.arrayBuffer());
      return ctx.use("simd-products", WebAssembly.validate(bytes), "no WebAssembly SIMD in this browser") ? bytes : null;
    })
    .catch((e) => {
      // The app runs without it, on the plain path; the console and siteInfo.paths say why.
      console.warn(`[site] ${file} not loaded, products take the plain path:`, e?.message || e);
      ctx.use("simd-products", false, `not loaded: ${e?.message || e}`);
      return null;
    });
}

/**
 * Hands the kernel to slm (slm.matmul.use_kernel), which loads it through ctypes into the interpreter's memory.
 * Called by the app worker only, after the import stage: a memory snapshot never holds it.
 */
export async function useKernel(ctx, pyodide, kernel) {
  const bytes = await kernel;
  if (!bytes) return;
  const path = "/tmp/slm-gemm.wasm";
  try {
    pyodide.FS.writeFile(path, bytes);
    const matmul = pyodide.pyimport("slm.matmul");
    matmul.use_kernel(path);
    matmul.destroy();
  } catch (e) {
    // As above: the plain path, said on the console and in siteInfo.paths.
    console.warn("[site] the SIMD kernel did not load, products take the plain path:", e?.message || e);
    ctx.use("simd-products", false, `did not load: ${String(e?.message || e).trim().split("\n").pop()}`);
  }
}
