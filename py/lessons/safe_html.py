"""What a lesson's HTML may contain, checked after rendering: the second of two fences around hostile lessons.

The first fence is the renderer itself (markdown-it with raw HTML off, links filtered by `safe_url`). This module
re-reads what it produced with an allowlist of tags, attributes and URLs, so a bug or a new Markdown feature cannot
let a script, an event handler, a style or a `javascript:` URL through unnoticed.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Tags the renderer makes from Markdown, and the attributes each may carry.
ALLOWED = {
    "p": (), "em": (), "strong": (), "s": (), "code": ("class",), "pre": (), "br": (), "hr": (), "blockquote": (),
    "ul": (), "ol": ("start",), "li": (), "h3": (), "h4": (), "h5": (), "h6": (),
    "table": (), "thead": (), "tbody": (), "tr": (), "th": ("class",), "td": ("class",),
    "a": ("href", "class", "rel", "title"), "img": ("src", "alt", "title"), "span": ("class",), "div": ("class",),
}
CLASS_RE = re.compile(r"^[a-z0-9 _-]*$")
SCHEMES = ("http", "https", "mailto")
SCHEME_RE = re.compile(r"^([a-z][a-z0-9+.-]*):")


def safe_url(url: str) -> bool:
    """True for http(s), mailto, and relative URLs (a path, `#anchor`, `?query`); False for every other scheme
    (javascript:, data:, vbscript:, file:, ...) and for anything whose text before the first / ? # holds a colon
    that is not one of those schemes (an encoded or split scheme such as `java%09script:`)."""
    text = url.strip().lower()
    if any(ord(c) < 32 or c == "\\" for c in text):
        return False
    match = SCHEME_RE.match(text)
    if match:
        return match.group(1) in SCHEMES
    return ":" not in re.split(r"[/?#]", text, maxsplit=1)[0]


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED:
            self.problems.append(f"tag <{tag}>")
            return
        for name, value in attrs:
            value = value or ""
            if name not in ALLOWED[tag]:
                self.problems.append(f"attribute {name} on <{tag}>")
            elif name in ("href", "src") and not safe_url(value):
                self.problems.append(f"URL {value!r}")
            elif name == "class" and not CLASS_RE.match(value):
                self.problems.append(f"class {value!r}")

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag: str) -> None:
        if tag not in ALLOWED:
            self.problems.append(f"tag </{tag}>")

    def handle_comment(self, data: str) -> None:
        self.problems.append("a comment")

    def handle_decl(self, decl: str) -> None:
        self.problems.append("a declaration")

    def handle_pi(self, data: str) -> None:
        self.problems.append("a processing instruction")

    def unknown_decl(self, data: str) -> None:
        self.problems.append("a declaration")


def html_problems(html: str) -> list[str]:
    """What in `html` is outside the allowlist (empty when it is all allowed)."""
    checker = _Checker()
    checker.feed(html)
    checker.close()
    return checker.problems
