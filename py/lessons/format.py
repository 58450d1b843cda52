"""A lesson file (Markdown, docs/lessons.md) → a `Lesson`: steps of prose, questions and coding challenges.

markdown-it-py parses the Markdown (raw HTML off, so any tag is shown as text); this module walks its top-level
blocks and recognises the lesson's parts. Every problem is collected with its line number and reported at once as
a `LessonError`; nothing else escapes `parse`, whatever the file holds.
"""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.front_matter import front_matter_plugin

from . import states
from .safe_html import html_problems, safe_url

MAX_BYTES = 500_000  # a lesson is prose and a few code blocks; anything this large is a wrong file
FRONT_MATTER_KEYS = ("title", "model")
ROLES = ("starter", "check", "solution")
TASK_RE = re.compile(r"^\[([ xX])\]\s+")
ANSWER_RE = re.compile(r"^answer:\s*", re.IGNORECASE)
FEEDBACK_RE = re.compile(r"^(right|wrong):\s*(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based line of the file
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class LessonError(ValueError):
    """A lesson file that cannot be used: `problems` names each fault with its line."""

    def __init__(self, problems: list[Problem], source: str = "") -> None:
        self.problems = sorted(problems, key=lambda p: p.line)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + "; ".join(str(p) for p in self.problems))


@dataclass
class Prose:
    html: str
    line: int
    kind: str = "prose"


@dataclass
class Option:
    html: str
    correct: bool
    feedback_html: str
    line: int


@dataclass
class Grade:
    correct: bool
    feedback_html: list[str]  # the feedback of each chosen option, in the options' order


@dataclass
class Question:
    """A task list: `- [x]` right, `- [ ]` wrong; several right options mean "choose all that apply"."""

    prompt_html: str
    options: list[Option]
    line: int
    kind: str = "choice"

    @property
    def multiple(self) -> bool:
        return sum(option.correct for option in self.options) > 1

    def grade(self, chosen: set[int] | list[int]) -> Grade:
        """Right when the chosen option indices are exactly the right ones."""
        chosen = set(chosen)
        right = {i for i, option in enumerate(self.options) if option.correct}
        feedback = [option.feedback_html for i, option in enumerate(self.options) if i in chosen and
                    option.feedback_html]
        return Grade(chosen == right, feedback)


@dataclass
class SelectQuestion:
    """"Select it in the view": right when the page's state agrees with one of `answers`."""

    prompt_html: str
    answers: list[dict[str, str]]
    line: int
    right_html: str = ""
    wrong_html: str = ""
    kind: str = "select"

    def grade(self, state: dict[str, Any]) -> Grade:
        """`state`: the page's URL keys → values, e.g. {"view": "heads", "layer": 1, "head": 5}."""
        correct = states.matches(self.answers, state)
        text = self.right_html if correct else self.wrong_html
        return Grade(correct, [text] if text else [])


@dataclass
class Code:
    text: str
    line: int  # the line of the code's first line in the file (the fence's line + 1)


@dataclass
class Challenge:
    """A `python starter` block, its hidden `python check`, and an optional `python solution`."""

    starter: Code
    check: Code | None = None
    solution: Code | None = None
    needs_model: bool = False  # `python check model`: the check (and the learner's code) get the app's model
    line: int = 0
    kind: str = "challenge"


Block = Prose | Question | SelectQuestion | Challenge


@dataclass
class Step:
    number: int  # 1-based
    id: str  # a slug of the title, unique in the lesson
    title: str
    line: int
    blocks: list[Block] = field(default_factory=list)
    state: dict[str, str] = field(default_factory=dict)  # the first ?query link's state: set when the step opens
    state_line: int = 0

    @property
    def questions(self) -> list[Question | SelectQuestion]:
        return [b for b in self.blocks if isinstance(b, (Question, SelectQuestion))]

    @property
    def challenges(self) -> list[Challenge]:
        return [b for b in self.blocks if isinstance(b, Challenge)]


@dataclass
class Lesson:
    name: str
    title: str
    model: str | None
    intro_html: str
    steps: list[Step]

    @property
    def challenges(self) -> list[Challenge]:
        return [c for step in self.steps for c in step.challenges]

    @property
    def questions(self) -> list[Question | SelectQuestion]:
        return [q for step in self.steps for q in step.questions]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the page (JSON): every block with its `kind`. Checks included: the page keeps them from
        the learner."""
        return asdict(self)


# ---- rendering ----

def _math(content: str, options: dict[str, Any]) -> str:
    return html.escape(content)  # TeX source, escaped: the view typesets it (class "math inline" / "math block")


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "maxNesting": 20})
    md.use(front_matter_plugin).use(dollarmath_plugin, allow_digits=False, allow_labels=False, double_inline=True,
                                    renderer=_math)
    md.enable(["table", "strikethrough"])
    md.validateLink = safe_url
    md.core.ruler.push("lesson_attrs", _lesson_attrs)
    return md


def _lesson_attrs(state: Any) -> None:
    """State links get class "lesson-state" (the view applies them instead of following them); outside links
    rel="noopener"; table alignment becomes a class, as the view allows no style attribute."""
    for token in state.tokens:
        for child in [token, *(token.children or [])]:
            if child.type == "link_open":
                href = str(child.attrGet("href") or "")
                if href.startswith("?"):
                    child.attrSet("class", "lesson-state")
                elif href.startswith(("http:", "https:")):
                    child.attrSet("rel", "noopener noreferrer")
            elif child.type in ("th_open", "td_open") and child.attrs.get("style"):
                align = str(child.attrs.pop("style")).replace("text-align:", "").strip()
                child.attrSet("class", f"align-{align}")


MD = _markdown()


def _render(tokens: list[Token], env: dict) -> str:
    out = MD.renderer.render(tokens, MD.options, env)
    if html_problems(out):  # the allowlist disagrees with the renderer: show the text, run nothing
        return "<pre>" + html.escape(out) + "</pre>"
    return out


def _render_inline(text: str, env: dict) -> str:
    out = MD.renderInline(text, env)
    return out if not html_problems(out) else html.escape(text)


def _plain(inline: Token) -> str:
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline", "math_inline"))


def _slug(title: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "step"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


# ---- parsing ----

def decode(data: str | bytes) -> tuple[str, list[Problem]]:
    """The file's text, or the problems that make it no lesson (not UTF-8, control characters, too large)."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            return "", [Problem(1, f"the file has {len(data):,} bytes; a lesson may have at most {MAX_BYTES:,}")]
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            return "", [Problem(data[: exc.start].count(b"\n") + 1, "not UTF-8 text (is this a lesson file?)")]
    if len(data.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return "", [Problem(1, f"the file has more than {MAX_BYTES:,} bytes, the most a lesson may have")]
    data = data.lstrip("\ufeff")
    for i, char in enumerate(data):
        if (ord(char) < 32 and char not in "\t\n\r") or 0xD800 <= ord(char) <= 0xDFFF:
            return "", [Problem(data[:i].count("\n") + 1, f"control character U+{ord(char):04X} (is this a lesson "
                                                          "file?)")]
    return data.replace("\r\n", "\n").replace("\r", "\n"), []


def _blocks(tokens: list[Token]) -> list[list[Token]]:
    """The top-level blocks: each opening token with everything up to its closing one (or a lone token)."""
    blocks, i = [], 0
    while i < len(tokens):
        j = i
        if tokens[i].nesting == 1:
            depth = 0
            while j < len(tokens):
                depth += tokens[j].nesting
                if depth == 0:
                    break
                j += 1
        blocks.append(tokens[i: j + 1])
        i = j + 1
    return blocks


def _front_matter(token: Token | None, problems: list[Problem]) -> dict[str, str]:
    if token is None:
        problems.append(Problem(1, "a lesson starts with front matter: a line ---, then title: ..., then ---"))
        return {}
    meta = {}
    for n, line in enumerate(token.content.split("\n"), start=token.map[0] + 2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, colon, value = line.partition(":")
        key = key.strip()
        if not colon:
            problems.append(Problem(n, f"front matter: {line.strip()!r} is not key: value"))
        elif key not in FRONT_MATTER_KEYS:
            problems.append(Problem(n, f"front matter: unknown key {key!r} (keys: {', '.join(FRONT_MATTER_KEYS)})"))
        else:
            meta[key] = value.strip().strip("'\"")
    if not meta.get("title"):
        problems.append(Problem(token.map[0] + 1, "front matter: a lesson needs a title (title: ...)"))
    return meta


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.lines = text.split("\n")
        self.name = name
        self.problems: list[Problem] = []
        self.env: dict = {}

    def problem(self, line: int, message: str) -> None:
        self.problems.append(Problem(line, message))

    def parse(self) -> Lesson:
        tokens = MD.parse("\n".join(self.lines), self.env)
        front = tokens[0] if tokens and tokens[0].type == "front_matter" else None
        if front is None and self.lines and self.lines[0].strip() == "---":
            self.problem(1, "the front matter opened on line 1 is never closed (a line --- expected)")
            meta = {}
        else:
            meta = _front_matter(front, self.problems)
        if front is not None:
            tokens = tokens[1:]
        self._check_fences(tokens)
        intro: list[Block] = []
        steps: list[Step] = []
        slugs: set[str] = set()
        for block in _blocks(tokens):
            first = block[0]
            line = (first.map[0] + 1) if first.map else 1
            if first.type == "heading_open" and first.tag in ("h1", "h2"):
                if first.tag == "h1":
                    self.problem(line, "a # heading: the lesson's title goes in the front matter, and each step "
                                       "starts with ##")
                title = _plain(block[1]).strip() or f"Step {len(steps) + 1}"
                steps.append(Step(len(steps) + 1, _slug(title, slugs), title, line))
                continue
            target = steps[-1].blocks if steps else intro
            self._block(block, target, line, inside_step=bool(steps))
        for step in steps:
            self._finish_step(step)
        if not steps:
            last = len(self.lines) - (self.lines[-1] == "")  # a final newline ends the last line
            self.problem(max(1, last), "the lesson has no step: each step starts with a ## heading")
        intro_html = "".join(b.html for b in _merge(intro) if isinstance(b, Prose))
        return Lesson(self.name, meta.get("title", ""), meta.get("model") or None, intro_html, steps)

    def _check_fences(self, tokens: list[Token]) -> None:
        """markdown-it runs an unclosed fence to the end of the file: name the line that opened it."""
        for token in tokens:
            if token.type == "fence" and token.map:
                start, end = token.map
                last = self.lines[end - 1].strip() if end - 1 < len(self.lines) else ""
                closed = end - 1 > start and last.startswith(token.markup) and set(last) == {token.markup[0]}
                if not closed:
                    self.problem(start + 1, f"the code block opened here is never closed ({token.markup} expected)")

    def _block(self, block: list[Token], target: list[Block], line: int, inside_step: bool) -> None:
        first = block[0]
        if first.type == "fence":
            self._fence(first, target, line, inside_step)
        elif first.type in ("bullet_list_open", "ordered_list_open") and self._is_task_list(block):
            if not inside_step:
                self.problem(line, "a question before the first step (## heading)")
            self._question(block, target, line)
        elif first.type == "paragraph_open" and ANSWER_RE.match(block[1].content):
            if not inside_step:
                self.problem(line, "a question before the first step (## heading)")
            self._select(block[1], target, line)
        else:
            target.append(Prose(_render(block, self.env), line))

    # ---- questions ----

    def _is_task_list(self, block: list[Token]) -> bool:
        items = [(t, block[i + 2]) for i, t in enumerate(block)
                 if t.type == "list_item_open" and t.level == 1 and i + 2 < len(block)]
        marked = [item for item, inline in items if inline.type == "inline" and TASK_RE.match(inline.content)]
        if marked and len(marked) < len(items):
            for item, inline in items:
                if inline.type != "inline" or not TASK_RE.match(inline.content):
                    self.problem(item.map[0] + 1, "in a question every option starts with [x] (right) or [ ] "
                                                  "(wrong)")
        return bool(marked)

    def _prompt(self, target: list[Block], line: int) -> str:
        """A question's text: the paragraph right before it, taken out of the prose."""
        if target and isinstance(target[-1], Prose) and target[-1].html.startswith("<p>"):
            return target.pop().html
        self.problem(line, "a question needs its text as a paragraph right before it")
        return ""

    def _question(self, block: list[Token], target: list[Block], line: int) -> None:
        prompt = self._prompt(target, line)
        options = []
        item_starts = [i for i, t in enumerate(block) if t.type == "list_item_open" and t.level == 1]
        for k, start in enumerate(item_starts):
            end = item_starts[k + 1] if k + 1 < len(item_starts) else len(block) - 1
            item = block[start:end]
            item_line = item[0].map[0] + 1
            inline = item[2]
            match = TASK_RE.match(inline.content)
            if not match:
                continue  # reported by _is_task_list
            feedback = []
            for t in item[3:]:
                if t.level == 2 and t.nesting >= 0 and t.type not in ("bullet_list_open", "ordered_list_open"):
                    self.problem((t.map[0] + 1) if t.map else item_line,
                                 "an option is one paragraph, with its feedback as a nested bullet")
                if t.type == "inline" and t.level == 5:  # list item > paragraph > inline of a nested bullet
                    feedback.append(_render_inline(t.content, self.env))
                elif t.type == "inline" and t.level > 5:
                    self.problem(t.map[0] + 1, "feedback is one level of nested bullets")
            text = inline.content[match.end():]
            options.append(Option(_render_inline(text, self.env), match.group(1) != " ", " ".join(feedback),
                                  item_line))
        if len(options) < 2:
            self.problem(line, "a question needs at least two options")
        if options and not any(o.correct for o in options):
            self.problem(line, "a question needs at least one right option, marked [x]")
        target.append(Question(prompt, options, line))

    def _select(self, inline: Token, target: list[Block], line: int) -> None:
        prompt = self._prompt(target, line)
        answers, right, wrong = [], "", ""
        for n, text in enumerate(inline.content.split("\n"), start=line):
            match = FEEDBACK_RE.match(text.strip())
            if ANSWER_RE.match(text):
                alternatives, problems = states.parse_answer(ANSWER_RE.sub("", text))
                answers += alternatives
                for message in problems:
                    self.problem(n, message)
            elif match and match.group(1).lower() == "right":
                right = _render_inline(match.group(2), self.env)
            elif match:
                wrong = _render_inline(match.group(2), self.env)
            else:
                self.problem(n, f"after answer: only right: and wrong: lines may follow, not {text.strip()!r}")
        target.append(SelectQuestion(prompt, answers, line, right, wrong))

    # ---- challenges ----

    def _fence(self, token: Token, target: list[Block], line: int, inside_step: bool) -> None:
        words = token.info.split()
        if len(words) < 2 or words[0] not in ("python", "py") or words[1] not in ROLES:
            target.append(Prose(_render([token], self.env), line))  # a code example, shown as it is
            return
        role, flags = words[1], words[2:]
        if not inside_step:
            self.problem(line, f"a {role} block before the first step (## heading)")
        allowed = ("model",) if role == "check" else ()
        for flag in flags:
            if flag not in allowed:
                self.problem(line, f"unknown word {flag!r} after python {role}"
                                   + (" (only: model)" if allowed else ""))
        code = Code(token.content, line + 1)
        try:
            compile(code.text, f"<{role}>", "exec")
        except SyntaxError as exc:
            self.problem(code.line + (exc.lineno or 1) - 1, f"{role}: {exc.msg}")
        except ValueError as exc:  # e.g. a null byte
            self.problem(line, f"{role}: {exc}")
        last = next((b for b in reversed(target) if isinstance(b, Challenge)), None)
        if role == "starter":
            target.append(Challenge(code, line=line))
        elif last is None or getattr(last, role) is not None:
            self.problem(line, f"a {role} block needs a python starter block before it (one {role} per starter)")
        else:
            setattr(last, role, code)
            if role == "check":
                last.needs_model = "model" in flags

    def _finish_step(self, step: Step) -> None:
        for challenge in step.challenges:
            if challenge.check is None:
                self.problem(challenge.line, "a python starter block needs a python check block after it")
        step.blocks = _merge(step.blocks)
        self._state_link(step)

    def _state_link(self, step: Step) -> None:
        """The step's state: the first link whose target is a query string (?view=...)."""
        for block in step.blocks:
            texts = [block.html] if isinstance(block, Prose) else [getattr(block, "prompt_html", "")]
            for text in texts:
                match = re.search(r'<a href="(\?[^"]*)"', text)
                if match:
                    href = html.unescape(match.group(1))
                    step.state, problems = states.parse_query(href)
                    step.state_line = self._line_of(href, block.line)
                    for message in problems:
                        self.problem(step.state_line, message)
                    return

    def _line_of(self, href: str, start: int) -> int:
        for n in range(start - 1, len(self.lines)):
            if "(" + href in self.lines[n] or href in self.lines[n]:
                return n + 1
        return start


def _merge(blocks: list[Block]) -> list[Block]:
    """Consecutive prose blocks as one."""
    out: list[Block] = []
    for block in blocks:
        if isinstance(block, Prose) and out and isinstance(out[-1], Prose):
            out[-1] = Prose(out[-1].html + block.html, out[-1].line)
        else:
            out.append(block)
    return out


def parse(data: str | bytes, source: str = "lesson.md") -> Lesson:
    """The lesson in `data` (the file's text or bytes). `source` is its file name or URL; its last part without
    `.md` is the lesson's name. A `LessonError` lists every problem with its line; nothing else is raised."""
    name = re.sub(r"\.md$", "", source.rstrip("/").rsplit("/", 1)[-1]) or "lesson"
    text, problems = decode(bytes(data) if isinstance(data, (bytearray, memoryview)) else data)
    if problems:
        raise LessonError(problems, source)
    parser = _Parser(text, name)
    try:
        lesson = parser.parse()
    except RecursionError:
        raise LessonError([Problem(1, "the file nests too deeply to read")], source) from None
    except Exception as exc:  # noqa: BLE001 - a broken lesson must never break the page
        raise LessonError([Problem(1, f"the file could not be read ({type(exc).__name__}: {exc})")],
                          source) from None
    if parser.problems:
        raise LessonError(parser.problems, source)
    return lesson
