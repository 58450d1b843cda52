// The lesson panel: a lesson's steps beside the view each step opens (stacked on a narrow screen), Back/Next and
// progress, questions answered by click or keyboard, coding challenges in a code editor with Run/Check. The app's
// Python parses the lesson, applies a step's state and grades answers (playground.lesson_host, through the app
// worker); the learner's code runs in a worker the page can end (learner.js).
//
// What a lesson file holds reaches the page only as lessons' sanitised HTML (prose, questions, feedback: an
// allowlist of tags, attributes and URL schemes, no raw HTML) or as text (titles, code, messages): nothing of a
// file is run here, and its checks run only in the learner's worker, after the learner agrees when the lesson
// comes from another site.
import * as M from "../protocol.js";
import { mayFetch } from "./csp.js";
import { learnerPool } from "./learner.js";
import { loadProgress, persistent, saveProgress } from "./store.js";

const SOLUTION_AFTER = 2; // failed checks before "Show the solution" is offered
const EDITORS_AFTER_MS = 500; // the longest a step's code editors wait for its state to reach the view
const h = (tag, props = {}, ...children) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  el.append(...children.filter((c) => c !== null && c !== undefined));
  return el;
};

/** A lesson URL whose origin the page's Content-Security-Policy leaves out (csp.js). */
class NotAllowed extends Error {
  constructor(origin) {
    super(`${origin} is not in the page's connect-src`);
    this.origin = origin;
  }
}

/** Sets the sanitised HTML lessons made (never a file's text itself). */
const setSafeHtml = (el, html) => {
  el.innerHTML = html;
  return el;
};

export function lessonPanel(site) {
  const { worker, manifest, info } = site;
  const pool = learnerPool(site);
  const stats = (info.lesson = { opens: [], steps: [], checks: [] });
  let libs = null; // lesson-libs.js: the editor and the math
  let current = null; // {key, lesson, source, origin, progress, agreed}
  const agreedOrigins = new Set();
  const editors = new WeakMap(); // a challenge's box -> {getCode, setCode}
  let editorsToMake = []; // the shown step's code editors, each made once its state is on the view (show)
  // Lesson files (not built-in) opened on this page, by source: an offline copy carries them. The portable file's
  // own (site.carried) open by name.
  const files = new Map();
  for (const f of site.carried || []) files.set(f.source, f);

  // ---------------------------------------------------------------- the app worker's side (lesson_host)
  function call(request) {
    const channel = new MessageChannel();
    const answer = new Promise((resolve) => (channel.port1.onmessage = (event) => resolve(JSON.parse(event.data))));
    worker.postMessage(M.lesson(JSON.stringify(request)), [channel.port2]);
    return answer;
  }
  function currentModel() {
    const channel = new MessageChannel();
    const answer = new Promise((resolve) => (channel.port1.onmessage = (event) => resolve(event.data)));
    worker.postMessage(M.lessonModel(), [channel.port2]);
    return answer;
  }
  const sendLocation = () => worker.postMessage(M.locationOf(JSON.stringify(JSON.parse(JSON.stringify(location)))));

  function loadLibs() {
    libs ??= (async () => {
      const { loadScript } = site;
      await loadScript(manifest.site.lesson_libs);
      return self.slmLessonLibs;
    })();
    libs.catch((e) => console.error("[site] the lesson's editor could not load; a plain text box stands in:", e));
    return libs;
  }

  // ---------------------------------------------------------------- the panel's frame
  const root = h("section", { id: "lesson", class: "lesson", "aria-labelledby": "lesson-title", hidden: true });
  const title = h("h2", { id: "lesson-title", class: "lesson-title" });
  const progressText = h("p", { class: "lesson-progress-text" });
  const progressBar = h("progress", { class: "lesson-progress", max: 1, value: 0, "aria-label": "Lesson progress" });
  const closeButton = h("button", { type: "button", class: "lesson-close", onclick: () => close() }, "Close lesson");
  const stepBox = h("div", { class: "lesson-step" });
  const back = h("button", { type: "button", class: "lesson-back", onclick: () => show(current.progress.step - 1) }, "Back");
  const next = h("button", { type: "button", class: "lesson-next", onclick: () => show(current.progress.step + 1) }, "Next");
  const stepOf = h("span", { class: "lesson-step-of", "aria-live": "polite" });
  const storageNote = persistent ? null
    : h("p", { class: "lesson-note", text: "This page has no storage: your answers and code last until you close it." });
  root.append(
    h("header", { class: "lesson-head" }, h("p", { class: "lesson-kicker", text: "Lesson" }), title, closeButton,
      progressText, progressBar, storageNote),
    stepBox,
    h("nav", { class: "lesson-nav", "aria-label": "Lesson steps" }, back, stepOf, next),
  );
  const main = document.querySelector("main");
  main.insertBefore(root, document.getElementById("app"));

  function close() {
    root.hidden = true;
    document.body.classList.remove("with-lesson");
    current = null;
    const params = new URLSearchParams(location.search);
    params.delete("lesson");
    params.delete("step");
    history.replaceState(null, "", `?${params}`);
    sendLocation();
  }

  // ---------------------------------------------------------------- opening
  function showProblems(name, problems) {
    root.hidden = false;
    document.body.classList.add("with-lesson");
    title.textContent = `This lesson could not be opened: ${name}`;
    progressText.textContent = "";
    progressBar.hidden = true;
    back.hidden = next.hidden = true;
    stepOf.textContent = "";
    stepBox.replaceChildren(h("ul", { class: "lesson-problems" },
      ...problems.map((p) => h("li", { text: p.line ? `line ${p.line}: ${p.message}` : p.message }))));
  }

  /** `ref`: what `?lesson=` says to open it again (none for a dropped or chosen file). */
  async function opened(answer, source, { origin = null, step = null, ref = null } = {}) {
    if (!answer.ok) {
      showProblems(source, answer.problems || [{ line: 0, message: answer.error || "unknown error" }]);
      return false;
    }
    const lesson = answer.lesson;
    const progress = loadProgress(answer.key);
    current = { key: answer.key, lesson, source, origin, progress, ref };
    root.hidden = false;
    progressBar.hidden = back.hidden = next.hidden = false;
    document.body.classList.add("with-lesson");
    title.textContent = lesson.title;
    loadLibs(); // the editor, and the math of the prose
    if (lesson.model) applyState({ model: lesson.model }); // the front matter's model; the step's link may change it
    await show(step || progress.step || 1, { focus: false });
    return true;
  }

  /** Opens a built-in lesson by name, or a lesson file by URL (relative to the page). */
  async function open(ref, step = null) {
    const t0 = performance.now();
    let ok;
    const carried = [...files.values()].find((f) => f.name === ref && (site.carried || []).includes(f));
    if (carried) {
      ok = await opened(await call({ op: "open", text: carried.text, source: carried.source }), carried.source,
        { step, ref });
    } else if (/^[\w-]+$/.test(ref)) {
      ok = await opened(await call({ op: "open", name: ref }), ref, { step, ref });
    } else {
      let url;
      let text;
      try {
        url = new URL(ref, location.href);
        if (!["http:", "https:"].includes(url.protocol) && url.origin !== location.origin) throw new Error("not a web address");
        if (["http:", "https:"].includes(url.protocol) && !mayFetch(url)) throw new NotAllowed(url.origin);
        const resp = await fetch(url);
        if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
        text = await resp.text();
      } catch (e) { // the lesson's file cannot be read: the panel says so, in place of the lesson
        showProblems(ref, [{ line: 0, message: unreadable(e, url) }]);
        stats.opens.push({ ref, ok: false, ms: Math.round(performance.now() - t0), at: performance.now() });
        return;
      }
      const origin = url.origin === location.origin ? null : url.origin;
      ok = await opened(await call({ op: "open", text, source: url.href }), url.href, { origin, step, ref });
      if (ok) remember(current.lesson.name, url.href, text);
    }
    // shownMs: the first step is on the panel; ms: its state has reached the app's view too.
    stats.opens.push({ ref, ok, ms: Math.round(performance.now() - t0), shownMs: Math.round(stats.shownAt - t0),
      at: performance.now() });
  }

  /** Why a lesson file could not be read, in words for the learner (and for the site's host). */
  function unreadable(e, url) {
    if (e instanceof NotAllowed) {
      return site.offline
        ? `This offline copy fetches nothing from the web, so no lesson from ${e.origin}: download the lesson file ` +
          "and drop it on the page."
        : `This site does not let lessons be fetched from ${e.origin}. Its host can allow that origin by building the ` +
          `site with: python build.py --lesson-origin ${e.origin}. Or download the lesson file and drop it on the page.`;
    }
    const detail = e.message || String(e);
    if (e instanceof TypeError && url && url.origin !== location.origin) {
      // A network failure, or a site that does not let other pages read its files: the browser does not say which.
      return `could not be read from ${url.origin}: ${detail}. Is the address right, and does that site let other ` +
        "sites read it (the header Access-Control-Allow-Origin)?";
    }
    return `could not be read: ${detail}`;
  }

  /** A lesson file dropped on the page or picked: opened at once (an instructor's live preview). */
  async function openFile(name, bytes) {
    const t0 = performance.now();
    const text = new TextDecoder().decode(bytes);
    const ok = await opened(await call({ op: "open", text, source: name }), name);
    if (ok) remember(current.lesson.name, name, text);
    stats.opens.push({ ref: name, ok, ms: Math.round(performance.now() - t0), shownMs: Math.round(stats.shownAt - t0) });
  }

  function remember(name, source, text) {
    files.delete(source);
    files.set(source, { name, source, text });
  }

  /** The lesson files open on this page, the one shown (or last opened) first. */
  function lessonFiles() {
    const all = [...files.values()].reverse();
    const shown = all.findIndex((f) => f.source === current?.source);
    if (shown > 0) all.unshift(...all.splice(shown, 1));
    return all;
  }

  // ---------------------------------------------------------------- a step
  function save() {
    saveProgress(current.key, current.progress);
  }

  function updateProgress() {
    const { lesson, progress } = current;
    let total = 0;
    let done = 0;
    lesson.steps.forEach((s) => s.blocks.filter((b) => b.kind !== "prose").forEach((b, i) => {
      total += 1;
      const id = `${s.number}.${i}`;
      if (b.kind === "challenge" ? progress.checks[id]?.passed : progress.answers[id]?.correct) done += 1;
    }));
    progressBar.max = Math.max(1, total);
    progressBar.value = done;
    progressText.textContent = `${done} of ${total} questions and challenges done`;
  }

  async function applyState(state) {
    const answer = await call({ op: "apply", state });
    if (answer.error) console.warn("[site] the step's state:", answer.error);
    sendLocationLater();
  }
  let locationTimer = null;
  const sendLocationLater = () => {
    clearTimeout(locationTimer);
    locationTimer = setTimeout(() => current && keepLessonInUrl(), 300);
  };
  function keepLessonInUrl() {
    // The lesson's keys in the page's address (a reload or a link comes back to the step), and in the app's copy
    // of it: the app writes the query string from that copy as its state changes.
    const params = new URLSearchParams(location.search);
    if (current.ref) {
      params.set("lesson", current.ref);
      params.set("step", String(current.progress.step));
    } else {
      params.delete("lesson");
      params.delete("step");
    }
    if (`?${params}` === location.search) return;
    history.replaceState(null, "", `?${params}`);
    sendLocation();
  }

  async function show(number, { focus = true } = {}) {
    const t0 = performance.now();
    const { lesson, progress } = current;
    const n = Math.min(Math.max(1, number), lesson.steps.length);
    const step = lesson.steps[n - 1];
    progress.step = n;
    save();
    back.disabled = n === 1;
    next.disabled = n === lesson.steps.length;
    stepOf.textContent = `Step ${n} of ${lesson.steps.length}`;
    const heading = h("h3", { class: "lesson-step-title", tabindex: "-1", text: step.title });
    const parts = [heading];
    if (n === 1 && lesson.intro_html) parts.push(setSafeHtml(h("div", { class: "lesson-prose lesson-intro" }), lesson.intro_html));
    editorsToMake = [];
    let item = 0;
    for (const block of step.blocks) {
      if (block.kind === "prose") parts.push(setSafeHtml(h("div", { class: "lesson-prose" }), block.html));
      else if (block.kind === "challenge") parts.push(challenge(step, block, item++));
      else parts.push(question(step, block, item++));
    }
    stepBox.replaceChildren(...parts);
    typeset(stepBox);
    updateProgress();
    keepLessonInUrl();
    if (focus) heading.focus();
    const applied = Object.keys(step.state || {}).length ? applyState(step.state) : Promise.resolve();
    // The code editors replace their text boxes once the step's state is on the view (or after a moment): made at
    // once, they would hold this thread while the view's update waits behind them.
    const toMake = editorsToMake;
    Promise.race([applied, new Promise((resolve) => setTimeout(resolve, EDITORS_AFTER_MS))])
      .then(() => toMake.forEach((make) => make()));
    // shownMs: the step is on the panel; ms: its state has reached the app's view too.
    stats.shownAt = performance.now();
    const record = { step: n, shownMs: Math.round(stats.shownAt - t0) };
    stats.steps.push(record);
    await applied;
    record.ms = Math.round(performance.now() - t0);
    // The spare learner's worker boots once a step with a challenge is drawn, view included (it would take a core
    // from the step change), while the learner reads the step.
    if (step.blocks.some((b) => b.kind === "challenge")) pool.warm();
  }

  // A state link in the prose applies its state instead of being followed.
  stepBox.addEventListener("click", (event) => {
    const link = event.target.closest?.("a.lesson-state");
    if (!link) return;
    event.preventDefault();
    applyState(Object.fromEntries(new URLSearchParams(link.getAttribute("href").slice(1))));
  });

  // Math wider than the panel scrolls in its own box, which a keyboard can then reach (a narrow screen, a long
  // formula); checked again when the panel's width changes.
  const reachable = () => {
    for (const m of stepBox.querySelectorAll(".math[data-typeset]")) {
      if (m.scrollWidth > m.clientWidth + 1) m.setAttribute("tabindex", "0");
      else m.removeAttribute("tabindex");
    }
  };
  if ("ResizeObserver" in self) new ResizeObserver(reachable).observe(stepBox);

  /** The formula's characters without its TeX annotation ("5×4"). */
  function mathText(math) {
    const copy = math.cloneNode(true);
    for (const a of copy.querySelectorAll("annotation")) a.remove();
    return copy.textContent.replace(/\s+/g, " ").trim();
  }

  async function typeset(el) {
    const maths = [...el.querySelectorAll(".math")];
    if (!maths.length) return;
    let lib;
    try {
      lib = await libs;
    } catch (e) {
      return; // the TeX stays as text
    }
    for (const m of maths) {
      if (!m.isConnected || m.dataset.typeset) continue;
      const tex = m.textContent;
      m.innerHTML = lib.renderMath(tex, m.classList.contains("block")); // KaTeX's MathML: the TeX escaped
      m.dataset.typeset = "1";
      // An option's label names its input; name computation (axe's) takes no text from MathML: its plain text, read.
      const math = m.querySelector("math");
      if (math && m.closest("label")) math.setAttribute("aria-label", mathText(math));
    }
    reachable();
  }

  function postEvent(event) {
    if (event && window.parent !== window) window.parent.postMessage(event, "*");
  }

  // ---------------------------------------------------------------- questions
  function question(step, block, item) {
    const id = `${step.number}.${item}`;
    const saved = current.progress.answers[id];
    const promptId = `lesson-q-${step.number}-${item}`;
    const feedback = h("div", { class: "lesson-feedback", role: "status" });
    const box = h("div", { class: "lesson-question", role: "group", "aria-labelledby": promptId });
    const prompt = setSafeHtml(h("div", { class: "lesson-prompt", id: promptId }), block.prompt_html);
    const showGrade = (grade) => {
      feedback.className = `lesson-feedback ${grade.correct ? "right" : "wrong"}`;
      feedback.replaceChildren(h("strong", { text: grade.correct ? "Right." : "Not quite." }),
        ...(grade.feedback_html || []).map((f) => setSafeHtml(h("div", { class: "lesson-prose" }), f)));
      typeset(feedback);
    };
    if (block.kind === "select") {
      const checkButton = h("button", { type: "button", class: "lesson-answer" }, "Check my selection");
      checkButton.addEventListener("click", async () => {
        const grade = await call({ op: "grade", key: current.key, step: step.number, item });
        if (grade.error) return showGrade({ correct: false, feedback_html: [] });
        current.progress.answers[id] = { correct: grade.correct };
        save();
        showGrade(grade);
        updateProgress();
        postEvent(grade.event);
      });
      box.append(prompt, checkButton, feedback);
      if (saved) showGrade({ correct: saved.correct, feedback_html: [] });
      return box;
    }
    const multiple = Boolean(block.multiple); // several right options: choose all that apply
    const type = multiple ? "checkbox" : "radio";
    const name = `lesson-${step.number}-${item}`;
    const inputs = block.options.map((option, i) => {
      const input = h("input", { type, name, value: String(i), checked: saved?.chosen?.includes(i) || null });
      return h("label", { class: "lesson-option" }, input, setSafeHtml(h("span"), option.html));
    });
    const said = /all that apply/i.test(prompt.textContent); // the question says it already
    const hint = multiple && !said ? h("p", { class: "lesson-hint", text: "Choose all that apply." }) : null;
    const answerButton = h("button", { type: "button", class: "lesson-answer" }, "Check answer");
    answerButton.addEventListener("click", async () => {
      const chosen = inputs.map((l, i) => (l.querySelector("input").checked ? i : -1)).filter((i) => i >= 0);
      if (!chosen.length) {
        feedback.className = "lesson-feedback";
        feedback.textContent = "Choose an answer first.";
        return;
      }
      const grade = await call({ op: "grade", key: current.key, step: step.number, item, chosen });
      if (grade.error) return;
      current.progress.answers[id] = { chosen, correct: grade.correct };
      save();
      showGrade(grade);
      updateProgress();
      postEvent(grade.event);
    });
    box.append(...[prompt, hint, h("div", { class: "lesson-options" }, ...inputs), answerButton, feedback].filter(Boolean));
    if (saved) showGrade({ correct: saved.correct, feedback_html: [] });
    return box;
  }

  // ---------------------------------------------------------------- coding challenges
  function challenge(step, block, item) {
    const id = `${step.number}.${item}`;
    const { progress } = current;
    const checks = (progress.checks[id] ??= { tries: 0, passed: false });
    const code = () => progress.code[id] ?? block.starter.text;
    const label = `Your code (step ${step.number}, challenge ${item + 1})`;
    const mount = h("div", { class: "lesson-editor" });
    const status = h("p", { class: "lesson-verdict", role: "status" });
    const output = h("pre", { class: "lesson-output", hidden: true, tabindex: "0", "aria-label": "Output" });
    const solutionBox = h("div", { class: "lesson-solution" });
    let editor = null;
    const onChange = (text) => {
      progress.code[id] = text;
      save();
    };
    // A plain text box until the editor has loaded (or for good, if it cannot): the code is the same.
    const plain = h("textarea", { class: "lesson-plain-editor", rows: String(Math.min(24, code().split("\n").length + 2)),
      spellcheck: "false", "aria-label": label });
    plain.value = code();
    plain.addEventListener("input", () => onChange(plain.value));
    mount.append(plain);
    const getCode = () => (editor ? editor.get() : plain.value);
    const setCode = (text) => {
      if (editor) editor.set(text);
      else plain.value = text;
      onChange(text);
    };
    editorsToMake.push(() => libs?.then((lib) => {
      if (!mount.isConnected && !stepBox.contains(mount)) return; // the learner has moved on
      const focused = document.activeElement === plain;
      const text = plain.value;
      mount.replaceChildren();
      editor = lib.createEditor(mount, text, onChange, label);
      if (focused) editor.focus();
    }, () => undefined));
    const runButton = h("button", { type: "button", class: "lesson-run" }, "Run");
    const checkButton = h("button", { type: "button", class: "lesson-check" }, "Check");
    const resetButton = h("button", { type: "button", class: "lesson-reset" }, "Start over");
    const solutionButton = h("button", { type: "button", class: "lesson-show-solution",
      hidden: !(block.solution && checks.tries >= SOLUTION_AFTER && !checks.passed) || null }, "Show the solution");
    resetButton.addEventListener("click", () => setCode(block.starter.text));
    solutionButton.addEventListener("click", () => {
      solutionBox.replaceChildren(h("p", { text: "One solution (yours may differ and still pass):" }),
        h("pre", { class: "lesson-solution-code", tabindex: "0", text: block.solution.text }));
    });

    async function go(withCheck) {
      if (withCheck && current.origin && !agreedOrigins.has(current.origin)) {
        askConsent(current.origin, status, () => go(withCheck));
        return;
      }
      runButton.disabled = checkButton.disabled = true;
      const t0 = performance.now();
      status.className = "lesson-verdict";
      status.textContent = withCheck ? "Checking…" : "Running…";
      try {
        const model = withCheck && block.needs_model ? (await currentModel()).buffer : null;
        const boots = pool.stats.boots;
        const usual = boots.length ? ` (it took ${(boots.at(-1) / 1000).toFixed(1)} s last time)` : "";
        const { verdict, waitedMs } = await pool.run(getCode(), withCheck ? block.check.text : null, model, (s) => {
          status.textContent = `Starting Python for your code: ${s.toFixed(1)} s${usual}…`;
        });
        showVerdict(verdict);
        if (withCheck) {
          checks.tries += 1;
          checks.passed ||= verdict.status === "passed";
          save();
          updateProgress();
          const answer = await call({ op: "checked", key: current.key, step: step.number, item,
            passed: verdict.status === "passed" });
          postEvent(answer.event);
          if (block.solution && checks.tries >= SOLUTION_AFTER && !checks.passed) solutionButton.hidden = false;
        }
        stats.checks.push({ status: verdict.status, waitedMs: Math.round(waitedMs),
          ms: Math.round(performance.now() - t0) });
      } finally {
        runButton.disabled = checkButton.disabled = false;
      }
    }
    function showVerdict(verdict) {
      const words = {
        passed: "Passed: your code does what the check asks.",
        ran: "Ran without errors.",
        failed: `Not yet: ${verdict.message}`,
        error: `Error: ${verdict.message}`,
        syntax: `Syntax error: ${verdict.message}`,
        timeout: `${verdict.message} Your code is still in the editor.`,
      };
      status.className = `lesson-verdict ${verdict.status}`;
      status.dataset.status = verdict.status;
      status.textContent = words[verdict.status] || `${verdict.status}: ${verdict.message}`;
      output.hidden = !verdict.stdout;
      output.textContent = verdict.stdout || "";
    }
    runButton.addEventListener("click", () => go(false));
    checkButton.addEventListener("click", () => go(true));
    if (checks.passed) {
      status.className = "lesson-verdict passed";
      status.textContent = "Passed earlier.";
    }
    const box = h("div", { class: "lesson-challenge" }, mount,
      h("div", { class: "lesson-buttons" }, runButton, checkButton, resetButton, solutionButton),
      status, output, solutionBox);
    editors.set(box, { getCode, setCode });
    return box;
  }

  function askConsent(origin, where, then) {
    const agree = h("button", { type: "button", class: "lesson-agree" }, `Run checks from ${origin}`);
    const notice = h("div", { class: "lesson-consent", role: "alert" },
      h("p", { text: `This lesson comes from ${origin}, not from this site. Its checks are Python code written there; ` +
        "they run in your browser, in a worker apart from this page, with your code. Run them only if you trust that site." }),
      agree);
    agree.addEventListener("click", () => {
      agreedOrigins.add(origin);
      notice.remove();
      then();
    });
    where.replaceChildren();
    where.after(notice);
    agree.focus();
  }

  // For the tests and the benchmark: the shown step's editors, replaced as a paste would.
  const shownEditor = (index) => editors.get([...stepBox.querySelectorAll(".lesson-challenge")][index]);
  info.lessonApi = {
    setCode: (text, index = 0) => shownEditor(index).setCode(text),
    getCode: (index = 0) => shownEditor(index).getCode(),
    open: (ref) => open(ref),
    show: (number) => show(number),
    openFile: (name, text) => openFile(name, new TextEncoder().encode(text).buffer), // what a drop hands over
    lessonFiles: () => lessonFiles(),
  };

  return { open, openFile, show, lessonFiles };
}
