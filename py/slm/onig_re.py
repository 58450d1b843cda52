"""The regular expressions of a `tokenizer.json` as Python `re` patterns.

The `tokenizers` library compiles a `Split` pre-tokenizer's pattern with Oniguruma, whose `\\p{L}` (a Unicode general
category), `\\s` (Unicode's White_Space) and `\\w` differ from Python's `re` or are missing there, and the `regex`
package that has them is not in Pyodide. `compile_pattern` rewrites those parts into character classes built from
`unicodedata` (one pass over the code points, on first use, cached) and leaves the rest, which both engines read
alike, to `re`. A construct it cannot carry over is a ValueError naming it. `find_spans` lists the matches the way
`tokenizers` iterates them (Rust's `onig` crate), which differs from `re.finditer` around empty matches.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

import numpy as np

# Unicode's White_Space property: Oniguruma's `\s` (Python's str.isspace also accepts U+001C..U+001F).
WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                       "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

_GROUPS = {"L": "Lu Ll Lt Lm Lo", "M": "Mn Mc Me", "N": "Nd Nl No", "P": "Pc Pd Ps Pe Pi Pf Po", "S": "Sm Sc Sk So",
           "Z": "Zs Zl Zp", "C": "Cc Cf Cs Co Cn", "LC": "Lu Ll Lt", "L&": "Lu Ll Lt"}
_LONG_NAMES = {
    "letter": "L", "casedletter": "LC", "uppercaseletter": "Lu", "lowercaseletter": "Ll", "titlecaseletter": "Lt",
    "modifierletter": "Lm", "otherletter": "Lo", "mark": "M", "combiningmark": "M", "nonspacingmark": "Mn",
    "spacingmark": "Mc", "enclosingmark": "Me", "number": "N", "decimalnumber": "Nd", "letternumber": "Nl",
    "othernumber": "No", "punctuation": "P", "connectorpunctuation": "Pc", "dashpunctuation": "Pd",
    "openpunctuation": "Ps", "closepunctuation": "Pe", "initialpunctuation": "Pi", "finalpunctuation": "Pf",
    "otherpunctuation": "Po", "symbol": "S", "mathsymbol": "Sm", "currencysymbol": "Sc", "modifiersymbol": "Sk",
    "othersymbol": "So", "separator": "Z", "spaceseparator": "Zs", "lineseparator": "Zl",
    "paragraphseparator": "Zp", "other": "C", "control": "Cc", "format": "Cf", "surrogate": "Cs",
    "privateuse": "Co", "unassigned": "Cn",
}
_ALL_CATEGORIES = " ".join(_GROUPS[g] for g in "LMNPSZC").split()
_SHORT_NAMES = {c.lower(): c for c in [*_ALL_CATEGORIES, *"LMNPSZC", "LC", "L&"]}
MAX_CODE_POINT = 0x10FFFF

Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive code point ranges
_category_runs: dict[str, list[tuple[int, int]]] = {}
_ranges_cache: dict[frozenset[str], Ranges] = {}
_compiled: dict[str, re.Pattern[str]] = {}


_multi_char_folds: set[str] = set()


def _every_code_point() -> str:
    return np.arange(MAX_CODE_POINT + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


def _runs_by_category() -> dict[str, list[tuple[int, int]]]:
    """Every code point's general category as runs, built once: about 0.1 s in CPython."""
    if not _category_runs:
        start = 0
        for category, run in itertools.groupby(map(unicodedata.category, _every_code_point())):
            n = len(list(run))
            _category_runs.setdefault(category, []).append((start, start + n - 1))
            start += n
    return _category_runs


def multi_char_folds() -> set[str]:
    """The case foldings longer than their character (ß -> ss, ﬁ -> fi): Oniguruma's `(?i)` matches them, `re`'s does
    not. Found by halving the string of all code points wherever casefold() lengthens it."""
    if not _multi_char_folds:
        stack = [_every_code_point()]
        while stack:
            text = stack.pop()
            if len(text.casefold()) == len(text):
                continue
            if len(text) == 1:
                _multi_char_folds.add(text.casefold())
            else:
                stack += [text[:len(text) // 2], text[len(text) // 2:]]
    return _multi_char_folds


def category_ranges(categories: frozenset[str]) -> Ranges:
    """The code points whose two-letter general category is one of `categories`."""
    if categories not in _ranges_cache:
        runs = _runs_by_category()
        _ranges_cache[categories] = _merge([r for c in categories for r in runs.get(c, ())])
    return _ranges_cache[categories]


def _merge(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for a, b in ranges:
        if a > start:
            out.append((start, a - 1))
        start = b + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return tuple(out)


def _property(name: str) -> Ranges | None:
    """`\\p{name}`: a general category (short or long name, as Oniguruma spells them), `Any` or `Assigned`; None
    for any other property."""
    key = name.lower().replace("_", "").replace(" ", "").replace("-", "")
    if key == "any":
        return ((0, MAX_CODE_POINT),)
    if key == "assigned":
        return _complement(category_ranges(frozenset({"Cn"})))
    short = _SHORT_NAMES.get(key) or _LONG_NAMES.get(key)
    if short is None:
        return None
    return category_ranges(frozenset(_GROUPS.get(short, short).split()))


def _whitespace() -> Ranges:
    return _merge([(ord(c), ord(c)) for c in WHITESPACE])


def _decimal() -> Ranges:
    return category_ranges(frozenset({"Nd"}))


def _hex() -> Ranges:
    return _merge([(ord("0"), ord("9")), (ord("A"), ord("F")), (ord("a"), ord("f"))])


_CLASS_ESCAPES = {"s": _whitespace, "d": _decimal, "h": _hex}


def _members(ranges: Ranges) -> str:
    """Ranges as the inside of a `re` character class, every character escaped (so no `--` or `[` to misread)."""
    return "".join(f"\\U{a:08X}" if a == b else f"\\U{a:08X}-\\U{b:08X}" for a, b in ranges)


def _class(ranges: Ranges) -> str:
    return f"[{_members(ranges)}]" if ranges else "(?!)"


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.src, self.i, self.out = pattern, 0, []
        self.option_groups = [0]  # per open group: how many `(?i:` an isolated `(?i)` opened, closed with the group
        self.ignore_case = [False]  # per open group: whether `(?i)` is on at this point of it
        self.literal = ""  # the run of literal characters just read, checked for folds `re` cannot match

    def fail(self, what: str, why: str = "") -> ValueError:
        return ValueError(f"the regular expression {self.src!r}: {what} is not supported{why}")

    def translate(self) -> str:
        src = self.src
        while self.i < len(src):
            c = src[self.i]
            literal = ""
            if c == "\\":
                text = self.escape(in_class=False)
                escaped = src[self.i - 1]
                literal = escaped if text == "\\" + escaped and not (escaped.isascii() and escaped.isalnum()) else ""
                self.out.append(text)
            elif c == "[":
                self.out.append(self.char_class())
            elif c == "(":
                self.open_group()
            elif c == ")":
                if len(self.option_groups) == 1:
                    raise self.fail("an unbalanced ')'")
                self.out.append(")" * (self.option_groups.pop() + 1))
                self.ignore_case.pop()
                self.i += 1
            else:
                literal = "" if c in ".^$|?*+{}" else c
                self.out.append(c)
                self.i += 1
            self.literal = self.literal + literal if literal else ""
            if literal and self.ignore_case[-1]:
                self.check_folds()
        if len(self.option_groups) != 1:
            raise self.fail("an unclosed '('")
        self.out.append(")" * self.option_groups[0])
        return "".join(self.out)

    def check_folds(self) -> None:
        """Oniguruma's `(?i)` also matches a character against a run of them (ß and ss, ﬁ and fi), `re`'s does not."""
        folded = self.literal.casefold()
        if len(folded) > len(self.literal) or (len(folded) > 1 and any(f in folded for f in multi_char_folds())):
            raise self.fail(f"case-insensitive {self.literal!r}", " (Oniguruma matches it against a character that "
                                                                  "folds to several, Python's re does not)")

    def open_group(self) -> None:
        src, i = self.src, self.i
        if not src.startswith("(?", i):
            self.out.append("(")
            self.option_groups.append(0)
            self.ignore_case.append(self.ignore_case[-1])
            self.i += 1
            return
        for head in ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>"):
            if src.startswith(head, i):
                self.out.append(head)
                self.option_groups.append(0)
                self.ignore_case.append(self.ignore_case[-1])
                self.i += len(head)
                return
        if src.startswith("(?#", i):  # a comment
            end = src.find(")", i)
            if end < 0:
                raise self.fail("an unclosed comment")
            self.i = end + 1
            return
        named = re.match(r"\(\?<([A-Za-z_]\w*)>", src[i:])
        if named:
            self.out.append(f"(?P<{named.group(1)}>")
            self.option_groups.append(0)
            self.ignore_case.append(self.ignore_case[-1])
            self.i += named.end()
            return
        options = re.match(r"\(\?([imx]*)(?:-([imx]*))?([:)])", src[i:])
        if not options:
            raise self.fail(f"the group {src[i:i + 4]!r}…")
        # Oniguruma's `m` is Python's `s` (dot matches a newline)
        on, off = (options.group(k) and options.group(k).replace("m", "s") for k in (1, 2))
        flags = (on or "") + (f"-{off}" if off else "")
        self.i += options.end()
        ignore_case = "i" in (on or "") or (self.ignore_case[-1] and "i" not in (off or ""))
        if options.group(3) == ":":
            self.out.append(f"(?{flags}:" if flags else "(?:")
            self.option_groups.append(0)
            self.ignore_case.append(ignore_case)
        elif flags:  # `(?i)` reaches to the end of the enclosing group, alternatives included, as in Oniguruma
            self.out.append(f"(?{flags}:")
            self.option_groups[-1] += 1
            self.ignore_case[-1] = ignore_case

    def property_ranges(self) -> Ranges:
        """After `\\p` or `\\P`: the `{name}` (or `{^name}`) that follows, as ranges (negation applied)."""
        src, i = self.src, self.i
        negate = src[i] == "P"
        if i + 1 >= len(src) or src[i + 1] != "{" or "}" not in src[i + 1:]:
            raise self.fail(f"\\{src[i]} without a {{name}}")
        end = src.index("}", i + 1)
        name = src[i + 2:end]
        if name.startswith("^"):
            negate, name = not negate, name[1:]
        self.i = end + 1
        ranges = _property(name)
        if ranges is None:
            raise self.fail(f"the Unicode property \\p{{{name}}}",
                            " (slm reads general categories such as \\p{L} or \\p{Lu}, not scripts)")
        return _complement(ranges) if negate else ranges

    def escape(self, in_class: bool) -> str:
        """The escape at self.i (a backslash) as `re` text: a class, or its members when inside a class."""
        src = self.src
        self.i += 1
        if self.i >= len(src):
            raise self.fail("a trailing backslash")
        c = src[self.i]
        if c in "pP":
            ranges = self.property_ranges()
            return _members(ranges) if in_class else _class(ranges)
        self.i += 1
        if c.lower() in _CLASS_ESCAPES:
            ranges = _CLASS_ESCAPES[c.lower()]()
            ranges = _complement(ranges) if c.isupper() else ranges
            return _members(ranges) if in_class else _class(ranges)
        if c == "x" and self.i < len(src) and src[self.i] == "{":
            end = src.find("}", self.i)
            if end < 0:
                raise self.fail("an unclosed \\x{")
            code = int(src[self.i + 1:end], 16)
            self.i = end + 1
            return f"\\U{code:08X}"
        if c in "wW" or (c in "bB" and not in_class):
            raise self.fail(f"\\{c}", " (Oniguruma's word characters follow Unicode's Alphabetic property, which "
                                       "unicodedata does not give)")
        simple = {"z": "\\Z", "Z": "(?=\\n?\\Z)", "A": "\\A", "e": "\\x1b"}
        if c in simple and (not in_class or c == "e"):
            return simple[c]
        if c in "ntrfvab" or c.isdigit() or c in "xu" or not c.isascii() or not c.isalnum():
            return "\\" + c  # the same in both engines (a backspace inside a class, a back reference outside)
        raise self.fail(f"the escape \\{c}")

    def char_class(self) -> str:
        src = self.src
        self.i += 1
        parts = ["["]
        if self.i < len(src) and src[self.i] == "^":
            parts.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(src):
                raise self.fail("an unclosed '['")
            c = src[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            if c == "\\":
                parts.append(self.escape(in_class=True))
            elif c == "[":
                raise self.fail("a nested character class")
            elif src.startswith("&&", self.i):
                raise self.fail("a class intersection '&&'")
            else:
                if self.ignore_case[-1] and len(c.casefold()) > 1:
                    self.literal = c
                    self.check_folds()
                parts.append(f"\\U{ord(c):08X}" if not c.isalnum() and c != "-" else c)
                self.i += 1
            first = False
        parts.append("]")
        return "".join(parts)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """An Oniguruma pattern (Ruby syntax, as `tokenizers` compiles it) as a compiled `re` pattern; `^` and `$` match
    at line breaks, as in Oniguruma."""
    compiled = _compiled.get(pattern)
    if compiled is None:
        text = _Translator(pattern).translate()
        try:
            compiled = re.compile(text, re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"the regular expression {pattern!r} is not supported here ({exc})") from None
        _compiled[pattern] = compiled
    return compiled


def find_spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    """The (start, end) of each match, as the `onig` crate's `find_iter` gives them: like `re.finditer`, except that
    an empty match where the previous match ended is skipped."""
    spans: list[tuple[int, int]] = []
    n, pos, last_end = len(text), 0, -1
    search = pattern.search
    while pos <= n:
        match = search(text, pos)
        if match is None:
            break
        start, end = match.span()
        if start == end == last_end:
            pos += 1
            continue
        spans.append((start, end))
        pos = last_end = end
    return spans
