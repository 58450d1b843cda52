// How the error panel names a package or a file, and what it shows of a Python traceback.

const PRETTY = { numpy: "NumPy", markupsafe: "MarkupSafe", "slm-playground": "the app (slm_playground wheel)" };
export const pretty = (name) => PRETTY[name] || name;

/** "NumPy (https://.../numpy-2.2.5-...whl)" for a package file, the site-relative path otherwise. */
export function describe(url, root) {
  const rel = url.startsWith(root) ? url.slice(root.length) : url;
  const m = /([^/]+?)-\d[^/-]*-[^/]*\.whl$/.exec(url);
  return m ? `${pretty(m[1].replace(/[-_.]+/g, "-").toLowerCase())} (${rel})` : rel;
}

/** describe() without the path: "NumPy", "the app (slm_playground wheel)". */
export const named = (url, root) => describe(url, root).replace(/ \([^()]*\)$/, "");

/** The last lines of a Python traceback: what the error panel shows. */
export const lastLines = (text) => text.trim().split("\n").slice(-12).join("\n");
