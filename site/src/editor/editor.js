// The lesson panel's libraries: the code editor (CodeMirror 6 with Python) and math (KaTeX, MathML output: the
// browsers draw MathML, so no fonts or stylesheet ship). Built by esbuild into build/lesson-libs.js (an IIFE that
// sets self.slmLessonLibs), which the page loads only when a lesson opens. Unlike the rest of site/src this file
// imports npm packages (pinned in build.lock): py/sitebuild/lesson_js.py bundles it, not bundle.py.
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { bracketMatching, defaultHighlightStyle, indentOnInput, indentUnit, syntaxHighlighting } from "@codemirror/language";
import { EditorState } from "@codemirror/state";
import { drawSelection, EditorView, highlightActiveLine, keymap, lineNumbers } from "@codemirror/view";
import katex from "katex";

/**
 * An editor in `parent` holding `text`; `onChange(text)` after each edit; `label` names it for screen readers.
 * Tab indents; Escape then Tab leaves the editor (CodeMirror's rule, so that a keyboard is never trapped).
 * @returns {{get: () => string, set: (text: string) => void, focus: () => void}}
 */
function createEditor(parent, text, onChange, label) {
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: text,
      extensions: [
        lineNumbers(),
        history(),
        drawSelection(),
        indentOnInput(),
        bracketMatching(),
        highlightActiveLine(),
        indentUnit.of("    "),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        python(),
        keymap.of([...defaultKeymap, ...historyKeymap, indentWithTab]),
        // tabindex: contenteditable is focusable anyway, but axe (in Firefox and WebKit) counts only a tabindex
        // as focusable content of the scrolling box around long lines.
        EditorView.contentAttributes.of({ "aria-label": label, tabindex: "0" }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) onChange(update.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    get: () => view.state.doc.toString(),
    set: (next) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: next } }),
    focus: () => view.focus(),
  };
}

/** TeX as MathML markup (KaTeX escapes what it does not understand; an error shows the TeX in red). */
function renderMath(tex, display) {
  return katex.renderToString(tex, { displayMode: display, output: "mathml", throwOnError: false, trust: false });
}

self.slmLessonLibs = { createEditor, renderMath };
