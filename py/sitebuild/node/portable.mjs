// Writes the portable edition: site/portable.js's assemble() run on the files of a built site (the same function
// the hosted page runs for "Save for offline use"). Called by sitebuild/assemble.py as
//   node portable.mjs <site folder> <output file>
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";

const [siteDir, out] = process.argv.slice(2);
// portable.js is an ES module in a folder without package.json: imported from its text, as a module.
const source = await readFile(path.join(siteDir, "portable.js"));
const { assemble } = await import(`data:text/javascript;base64,${source.toString("base64")}`);
const manifest = JSON.parse(await readFile(path.join(siteDir, "build", "manifest.json"), "utf8"));
const read = async (file) => new Uint8Array(await readFile(path.join(siteDir, file)));
await writeFile(out, await assemble({ manifest, read }));
