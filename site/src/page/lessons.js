// Lessons on the page: what the cold start carries of them is this file alone. The lesson panel (build/lesson.js,
// from site/src/lesson/) and its editor and math (build/lesson-libs.js) load when a lesson opens: from the URL
// (?lesson=NAME|URL), a link of the Lessons view, or a lesson file (.md) dropped on the page or picked.
import { SiteError } from "../protocol.js";
import { newWorker } from "./app-worker.js";
import { body, info, query } from "./env.js";
import { embeddedFile, portable, workerFiles } from "./portable-file.js";

/** Loads a script of the build once (in the portable file from its embedded bytes). */
const scripts = new Map();
export function loadScript(path) {
  if (!scripts.has(path)) {
    scripts.set(path, (async () => {
      const src = portable ? URL.createObjectURL(await embeddedFile(path)) : path;
      await new Promise((resolve, reject) => {
        const el = document.createElement("script");
        el.src = src;
        el.onload = resolve;
        el.onerror = () => reject(new SiteError(`Loading ${path}`, "failed to load"));
        document.head.appendChild(el);
      });
    })());
  }
  return scripts.get(path);
}

let opened = null; // the lesson panel, once loaded

/** The lesson files open on this page ([{name, source, text}], the one shown first), for the offline copy. */
export async function openLessonFiles() {
  return opened ? (await opened).lessonFiles() : [];
}

/** Whether these dropped files are a lesson (one Markdown file) rather than a model. */
export const isLessonDrop = (files) => files.length === 1 && /\.(md|markdown)$/i.test(files[0][0]);

/**
 * Once the app is ready: opens the URL's lesson, and from then on any lesson the learner asks for.
 * @returns {{openFile: (name: string, bytes: ArrayBuffer) => Promise<void>}} for a dropped or picked lesson file
 */
export function lessonsWhenReady(worker, manifest) {
  let panel = null;
  const load = () => {
    panel ??= (async () => {
      const t0 = performance.now();
      await loadScript(manifest.site.lesson_js);
      const learnerFiles = portable ? async () => workerFiles() : async () => [null, []];
      const carried = portable?.lessons || []; // the lesson files an offline copy was saved with
      const offline = Boolean(portable); // the portable file: no network (its CSP)
      const started = self.slmLessons.start({ worker, manifest, newWorker, learnerFiles, info, body, loadScript, carried,
        offline });
      info.timings.lessonScript = performance.now() - t0;
      return started;
    })();
    panel.catch((e) => console.error("[site] the lesson panel could not load:", e));
    opened = panel;
    return panel;
  };
  // An offline copy saved with a lesson file open opens it again (by its name; ?lesson= may name another).
  const ref = query.get("lesson") || portable?.lessons?.[0]?.name;
  if (ref) load().then((p) => p.open(ref, Number(query.get("step")) || null));
  // A lesson link of the Lessons view (inside BokehJS's shadow roots: the click's path names it) opens here.
  document.addEventListener("click", (event) => {
    const link = event.composedPath().find((el) => el instanceof Element && el.matches?.("a.pg-lesson-link"));
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    load().then((p) => p.open(link.dataset.lesson));
  });
  // "choose a lesson file" of the Lessons view: a file input of the page's own.
  const picker = Object.assign(document.createElement("input"), { type: "file", accept: ".md,.markdown,text/markdown", hidden: true });
  picker.setAttribute("aria-label", "Lesson file");
  picker.addEventListener("change", async () => {
    const file = picker.files[0];
    picker.value = "";
    if (file) (await load()).openFile(file.name, await file.arrayBuffer());
  });
  document.body.append(picker);
  document.addEventListener("click", (event) => {
    if (!event.composedPath().some((el) => el instanceof Element && el.matches?.("a.pg-lesson-pick"))) return;
    event.preventDefault();
    picker.click();
  });
  return {
    openFile: async (name, bytes) => (await load()).openFile(name, bytes),
  };
}
