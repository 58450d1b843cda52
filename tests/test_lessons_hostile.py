"""Hostile lesson files: whatever they hold, parsing runs nothing and the HTML a view would show carries no
script, event handler, style, javascript:/data: URL or unknown tag. The test's own checks, independent of
lessons.safe_html."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from lessons import LessonError, parse

HEAD = "---\ntitle: hostile\n---\n\n## Step\n\n"
TAGS_ALLOWED = {"p", "em", "strong", "s", "code", "pre", "br", "hr", "blockquote", "ul", "ol", "li", "h3", "h4",
                "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "a", "img", "span", "div"}
ATTRS_ALLOWED = {"href", "src", "alt", "title", "class", "rel", "start"}

HOSTILE = {
    "script tag": HEAD + "<script>alert(1)</script>\n\nText <script src=x></script> inline.\n",
    "onerror attribute": HEAD + '<img src=x onerror="alert(1)">\n\n![a](x "t\\" onerror=\\"alert(1)")\n',
    "javascript links": HEAD + "[a](javascript:alert(1)) [b](JaVaScRiPt:alert(1)) [c](java&#x09;script:alert(1))\n"
                               "[d]( javascript:alert(1)) <javascript:alert(1)> [e](vbscript:x) [f](file:///etc)\n\n"
                               "[g]: javascript:alert(1)\n\n[g]\n",
    "data URLs": HEAD + "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+) "
                        "[y](data:text/html,<script>alert(1)</script>)\n",
    "inline SVG": HEAD + '<svg onload="alert(1)"><script>alert(1)</script></svg>\n\n'
                         '<svg><a xlink:href="javascript:alert(1)"><text>x</text></a></svg>\n',
    "CSS": HEAD + "<style>body{display:none}</style>\n\n<div style=\"position:fixed;inset:0\">cover</div>\n\n"
                  "| a | b |\n|--:|:-:|\n| 1 | 2 |\n",
    "entity tricks": HEAD + "&lt;script&gt;alert(1)&lt;/script&gt; &#60;img src=x onerror=alert(1)&#62; "
                            "[x](&#106;avascript:alert(1)) [y](javascript&colon;alert(1))\n",
    "html in question and feedback": HEAD + "Pick <b onclick=alert(1)>one</b>.\n\n"
                                            "- [x] <img src=x onerror=alert(1)>\n  - <script>alert(1)</script>\n"
                                            "- [ ] [no](javascript:alert(1))\n",
    "html in select feedback": HEAD + "Click it <iframe src=//evil></iframe>.\n\nanswer: layer=1 head=0\n"
                                      "right: <script>alert(1)</script>\nwrong: [w](javascript:alert(1))\n",
    "math with html": HEAD + "$</span><script>alert(1)</script>$ and\n\n$$\n<img src=x onerror=alert(1)>\n$$\n",
    "html comment and cdata": HEAD + "<!-- <script>alert(1)</script> -->\n\n<![CDATA[<script>]]>\n\n<?php x ?>\n",
    "code that would write a file": HEAD + "```python starter\nopen(PWNED, 'w').write('x')\n```\n\n"
                                           "```python check\nopen(PWNED, 'w').write('x')\n```\n",
    "unterminated fence": HEAD + "```python starter\nx = 1\n\n## Another step\n\n<script>alert(1)</script>\n",
    "deeply nested lists": HEAD + "".join("  " * i + "- item\n" for i in range(3000)),
    "deeply nested quotes": HEAD + ">" * 5000 + " deep\n",
    "deep brackets": HEAD + "[" * 20000 + "x" + "]" * 20000 + "(" * 5000 + "\n",
    "huge file": HEAD + ("word " * 40 + "\n") * 5000,
    "binary garbage": bytes(range(256)) * 40,
    "nul bytes": (HEAD + "a\x00b\n").encode(),
    "not utf-8": b"---\ntitle: x\n---\n## S\n\n\xc3\x28 <script>\n",
}


def html_fields(lesson) -> list[str]:
    out = [lesson.intro_html]
    for step in lesson.steps:
        for block in step.blocks:
            for name in ("html", "prompt_html", "right_html", "wrong_html"):
                out.append(getattr(block, name, ""))
            for option in getattr(block, "options", []):
                out += [option.html, option.feedback_html]
    return out


def assert_inert(text: str) -> None:
    for tag, attrs in re.findall(r"<\s*/?\s*([a-zA-Z][^\s/>]*)([^>]*)>", text):
        assert tag.lower() in TAGS_ALLOWED, f"tag <{tag}> in {text!r}"
        for name, value in re.findall(r"([^\s=]+)\s*=\s*\"([^\"]*)\"", attrs):
            assert name.lower() in ATTRS_ALLOWED, f"attribute {name} in {text!r}"
            url = html.unescape(value).strip().lower()
            if name.lower() in ("href", "src"):
                assert not re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith(("http:", "https:", "mailto:")), \
                    f"URL {value!r}"
                assert ":" not in re.split(r"[/?#]", url)[0] or url.startswith(("http:", "https:", "mailto:"))
        names = re.sub(r"\"[^\"]*\"", "", attrs).lower()  # the attribute names, without their quoted values
        assert not re.search(r"\son\w+\s*=", names), f"event handler in {text!r}"
        assert "style" not in names, f"style in {text!r}"
        assert set(re.findall(r"([^\s=/]+)\s*=", names)) <= ATTRS_ALLOWED, f"attribute in {text!r}"
    assert "<!--" not in text and "<![CDATA[" not in text and "<?" not in text


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_lesson_runs_nothing_and_renders_inert(name, tmp_path, monkeypatch):
    pwned = tmp_path / "pwned"
    data = HOSTILE[name]
    if isinstance(data, str):
        data = data.replace("PWNED", repr(str(pwned)))
    try:
        lesson = parse(data, source=f"{name}.md")
    except LessonError as exc:
        assert exc.problems and all(p.line >= 1 for p in exc.problems)
        for problem in exc.problems:  # the messages are plain text a view escapes; they stay short
            assert len(problem.message) < 400
    else:
        for text in html_fields(lesson):
            assert_inert(text)
    assert not Path(pwned).exists()


def test_the_hostile_markup_is_shown_as_text():
    lesson = parse(HOSTILE["script tag"])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in lesson.steps[0].blocks[0].html
    links = parse(HOSTILE["javascript links"]).steps[0].blocks[0].html
    assert "<a" not in links  # every link refused: its text stays, as text
    table = parse(HOSTILE["CSS"]).steps[0].blocks[0].html
    assert 'class="align-right"' in table and 'style="' not in table


def test_safe_links_survive():
    lesson = parse(HEAD + "[a](https://example.org/x?y=1) [b](#top) [c](other.md) [d](mailto:me@example.org) "
                          "[e](?view=map)\n")
    text = lesson.steps[0].blocks[0].html
    assert text.count("<a ") == 5
    assert 'rel="noopener noreferrer"' in text


@pytest.mark.parametrize("url, safe", [
    ("https://example.org", True), ("http://x", True), ("mailto:a@b", True), ("#top", True), ("?view=map", True),
    ("other.md", True), ("../up/x.md", True), ("/abs", True), ("javascript:alert(1)", False),
    (" JavaScript:alert(1)", False), ("java%09script:alert(1)", False), ("data:text/html,x", False),
    ("vbscript:x", False), ("file:///etc/passwd", False), ("java\tscript:x", False), ("\\\\evil\\x", False),
])
def test_safe_url(url, safe):
    from lessons.safe_html import safe_url

    assert safe_url(url) is safe


def test_the_allowlist_finds_what_the_renderer_must_never_make():
    from lessons.safe_html import html_problems

    assert html_problems('<p>fine <a href="https://x" class="lesson-state">x</a></p>') == []
    for bad in ("<script>x</script>", '<p onclick="x">', '<a href="javascript:x">', '<img src="data:x">',
                '<div style="x">', "<svg>", "<!-- x -->", '<span class="a;b">'):
        assert html_problems(bad), bad
