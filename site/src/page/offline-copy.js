// "Save for offline use" (the full page on the hosted site): the portable file, assembled by portable.js from the
// files this visit loaded (the service worker's cache answers; NumPy too, wherever it came from), the models of
// the worker's store and the lesson files open on the page (the built-in lessons are in the app).
import { exportModels } from "../protocol.js";
import { keptHubModels } from "../worker/hub.js";
import { $, embed, mb, opaque } from "./env.js";
import { openLessonFiles } from "./lessons.js";
import { portable } from "./portable-file.js";

// The largest model the file embeds: base64 makes it 4/3 larger, and the whole file is read into memory when opened.
export const MODEL_MAX = 250_000_000;

/** What the file will not hold, in words: models above MODEL_MAX, and the Hub's (named by their source). */
async function leftOut(models) {
  const notes = models.filter((m) => m.bytes > MODEL_MAX)
    .map((m) => `${m.name} (${mb(m.bytes)}: a single file keeps models up to ${mb(MODEL_MAX)}; download its .npz instead)`);
  let hub = [];
  try {
    hub = await keptHubModels();
  } catch (e) {
    console.info("[site] the Hub's kept files could not be listed:", e?.message || e);
  }
  notes.push(...hub.map((name) => `${name} (from the Hugging Face Hub: open it there on the hosted page, hf=${name.split("@")[0]})`));
  return notes;
}

/** The models in the worker's store (slmStore), with their bytes. */
function storedModels(worker) {
  const channel = new MessageChannel();
  const answer = new Promise((resolve) => (channel.port1.onmessage = (event) => resolve(event.data)));
  worker.postMessage(exportModels(), [channel.port2]);
  return answer;
}

export function offerOfflineCopy(worker, manifest) {
  const footer = $("#offline");
  if (!footer || portable || opaque || embed) return;
  footer.hidden = false;
  const button = $("#save-offline");
  const status = $("#save-offline-status");
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "Putting the playground into one file…";
    try {
      const { assemble } = await import("./portable.js");
      const read = async (url) => {
        const resp = await fetch(url);
        if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
        return new Uint8Array(await resp.arrayBuffer());
      };
      const stored = await storedModels(worker);
      const models = stored.filter((m) => m.bytes <= MODEL_MAX);
      const notes = await leftOut(stored);
      const lessons = await openLessonFiles();
      const file = new Blob([await assemble({ manifest, read, models, lessons })], { type: "text/html" });
      const link = document.createElement("a");
      link.href = URL.createObjectURL(file);
      link.download = manifest.site.portable_name;
      link.click();
      status.textContent = `Saved ${manifest.site.portable_name} (${mb(file.size)}): open it from a folder or a USB stick, no network needed.` +
        (notes.length ? ` Not in it: ${notes.join("; ")}.` : "");
    } catch (e) {
      // Reported where the visitor looks: under the button, and in the console.
      console.error("[site] the offline copy could not be made:", e);
      status.textContent = `Could not save it: ${e.message || e}`;
    } finally {
      button.disabled = false;
    }
  });
}
