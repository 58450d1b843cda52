// Cache Storage holds only what makes a start faster (this build's files, the memory snapshot), so a start waits on
// it for a bounded time: a lookup that has not answered within ANSWER_MS is given up, as a refused one is, and the
// start goes on without it. (Firefox's storage can keep a lookup waiting, for one, while it clears the storage of
// another container.)
export const ANSWER_MS = 5000;

export class NoAnswer extends Error {}

/** `promise` (a Cache Storage lookup), or a NoAnswer rejection once ANSWER_MS have passed without an answer. */
export function answered(promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new NoAnswer(`Cache Storage did not answer within ${ANSWER_MS / 1000} s (${what})`)),
      ANSWER_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
