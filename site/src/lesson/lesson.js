// build/lesson.js: the lesson panel, which the page (page/lessons.js) loads when a lesson opens and starts with
// what it lends (the app worker, the manifest, how to make a worker, how to load a script).
import { lessonPanel } from "./panel.js";

self.slmLessons = { start: (site) => lessonPanel(site) };
