// A lesson's progress and the learner's code, kept per lesson in localStorage so that a reload loses nothing; in
// memory where the page has no storage (a sandboxed iframe, storage turned off), which then says so.

const PREFIX = "slm-lesson:";
const memory = new Map();

function storage() {
  try {
    const s = window.localStorage;
    const probe = `${PREFIX}probe`;
    s.setItem(probe, "1");
    s.removeItem(probe);
    return s;
  } catch (e) {
    return null; // no storage here: memory only
  }
}

const local = storage();

/** Whether progress survives a reload here. */
export const persistent = local !== null;

/**
 * The saved progress of lesson `key`: {step, answers: {"step.item": {chosen, correct}}, code: {"step.item": text},
 * checks: {"step.item": {tries, passed}}}.
 */
export function loadProgress(key) {
  const empty = { step: 1, answers: {}, code: {}, checks: {} };
  let text = memory.get(key);
  if (local) {
    try {
      text = local.getItem(PREFIX + key) ?? text;
    } catch (e) {
      console.warn("[site] the lesson's saved progress could not be read:", e);
    }
  }
  if (!text) return empty;
  try {
    return { ...empty, ...JSON.parse(text) };
  } catch (e) {
    return empty; // written by something else: start afresh
  }
}

export function saveProgress(key, progress) {
  const text = JSON.stringify(progress);
  memory.set(key, text);
  if (!local) return;
  try {
    local.setItem(PREFIX + key, text);
  } catch (e) {
    console.warn("[site] the lesson's progress could not be saved (storage full?):", e);
  }
}
