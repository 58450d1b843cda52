// Files dropped anywhere on the page, or chosen with "Load a model…", go to the app's Python. Several files, a folder
// or one .zip or .npz: read here, posted to the worker (protocol.js 'files'), which hands them to
// playground.inbox.deliver. One Markdown file is a lesson: it opens in the lesson panel (lessons.js).
import { files as filesMessage } from "../protocol.js";
import { body } from "./env.js";
import { isLessonDrop } from "./lessons.js";

// Files dropped anywhere on the page (several files, a folder, a .zip or .npz) go to the app's Python
// (worker.js -> boot.py deliver_files -> playground.inbox.deliver) as [relative path, bytes]. A drop before the app
// is ready is held until then. body[data-drop="over"] highlights the page while files are dragged over it.
export function dropTarget() {
  let target = null; // the worker, once the app is ready
  let lessons = null; // a lesson file (.md) goes to the lesson panel instead (page/lessons.js)
  let held = [];
  let depth = 0; // dragenter/dragleave pairs: they fire for every child element crossed
  const send = (dropped) => {
    if (lessons && isLessonDrop(dropped)) lessons.openFile(...dropped[0]);
    else target.postMessage(filesMessage(dropped), dropped.map(([, buffer]) => buffer));
  };
  const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
  const highlight = (on) => (on ? (body.dataset.drop = "over") : delete body.dataset.drop);
  document.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    depth += 1;
    highlight(true);
  });
  document.addEventListener("dragleave", (event) => {
    if (!carriesFiles(event)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) highlight(false);
  });
  document.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault(); // else the browser opens the file instead of dropping it here
    event.dataTransfer.dropEffect = "copy";
    highlight(true);
  });
  document.addEventListener("drop", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth = 0;
    highlight(false);
    // The entries must be taken now: the DataTransfer is emptied once this handler returns.
    const items = [...event.dataTransfer.items].filter((item) => item.kind === "file");
    const entries = items.map((item) => item.webkitGetAsEntry?.() || null);
    const plain = [...event.dataTransfer.files];
    readDropped(entries, plain).then((dropped) => {
      if (!dropped.length) return;
      if (target) send(dropped);
      else {
        held.push(...dropped);
        console.info(`[site] ${dropped.length} dropped file(s) held until the app has started`);
      }
    }, (e) => console.error("[site] the dropped files could not be read:", e));
  });
  return {
    ready(worker, lessonPanel) {
      target = worker;
      lessons = lessonPanel;
      if (held.length) send(held);
      held = [];
      takePicks(send);
    },
  };
}

// "Load a model…" (Panel's FileInput, css class pg-file) hands its files over as a drop does: as bytes, not as
// BokehJS's base64 value, which took ~5x the files' size in the worker's heap (string, bytes, the widget's copy).
// Elsewhere (another BokehJS, another file input) BokehJS reads the files itself.
function takePicks(send) {
  const view = window.Bokeh?.Models?.get?.("FileInput")?.prototype?.default_view?.prototype;
  const readFiles = view?.load_files;
  if (typeof readFiles !== "function") return;
  view.load_files = async function (files) {
    if (!this.model.css_classes?.includes("pg-file")) return readFiles.call(this, files);
    const picked = [];
    for (const file of files) picked.push([file.webkitRelativePath || file.name, await file.arrayBuffer()]);
    this.input_el.value = ""; // choosing the same files again is a new pick
    if (picked.length) send(picked);
  };
}

// [[relative path, ArrayBuffer], ...] of a drop: a folder's files under their path inside it. `entries` (one per
// dropped item, null where the engine gives none) are walked; without them, the plain list of files.
async function readDropped(entries, plain) {
  const files = [];
  if (entries.length && entries.every(Boolean)) {
    // A dropped folder's files are named by their path inside it.
    for (const entry of entries) await walkEntry(entry, files, entry.isDirectory ? `${entry.fullPath}/` : "/");
  } else {
    for (const file of plain) files.push([file.webkitRelativePath || file.name, await file.arrayBuffer()]);
  }
  return files;
}

async function walkEntry(entry, files, base) {
  if (entry.isFile) {
    const path = entry.fullPath.startsWith(base) ? entry.fullPath.slice(base.length) : entry.name;
    const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
    files.push([path, await file.arrayBuffer()]);
    return;
  }
  const reader = entry.createReader();
  for (;;) {
    // readEntries gives a folder's entries in batches (100 in Chromium) until it gives none.
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (!batch.length) break;
    for (const child of batch) await walkEntry(child, files, base);
  }
}
