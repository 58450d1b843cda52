"""slm.onig_re against Oniguruma as `tokenizers` runs it: each pattern cuts hundreds of strings (`Split`, isolated)
where `tokenizers` cuts them, and what cannot be carried over to Python's `re` is an error naming it."""

from __future__ import annotations

import pytest
from tokenizers import Regex
from tokenizers.pre_tokenizers import Split

from slm import onig_re
from testkit.tricky_text import sample_strings

PATTERNS = [
    r"\s+$", r"^ ?\S", r"[\p{P}\$\+<=>\^~\|]+", r"\p{N}+", r"[0-9][0-9][0-9]", r"a*", r"", r"x?", r"\s*", r".+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"[一-龥ࠀ-一가-퟿]+", r"\p{^L}+", r"\P{N}\p{N}", r"\p{Letter}+", r"\p{Lu}\p{Ll}*",
    r"[\p{P}\p{S}]+", r"\s?\p{P}+", r" ?[^(\s|.,!?…。，、।۔،)]+", r"(?i)bra|'s", r"a(?i)b|c", r"\d+\D", r"[\S&]+",
    r"\x{41}+", r"(?<name>\p{Lu})\p{Ll}?", r"[^\r\n\p{L}\p{N}]?+\p{L}+| ?[^\s\p{L}\p{N}]++[\r\n]*", r"(?=\p{N})", r"\Z",
    r"\z", r"\h+", r"(?<=\p{L})\p{N}", r"(?m:a.b)", r"[]a]+", r"[-a]+", r"(?>\s+)\S", r"\p{Cn}|\p{Co}|\p{Cs}",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_cuts_like_tokenizers(pattern):
    reference = Split(Regex(pattern), behavior="isolated")
    compiled = onig_re.compile_pattern(pattern)
    extra = ("'S", "'ſ", "'İ", "'ı", "'Ｓ", "BRAß", "aBc AbC", "a\nb", "x\r\n\n y ")
    for text in sample_strings(400, seed=30, extra=extra):
        pieces, done = [], 0
        for a, b in onig_re.find_spans(compiled, text):
            pieces += [text[done:a], text[a:b]]
            done = b
        pieces.append(text[done:])
        assert [p for p in pieces if p] == [p for p, _ in reference.pre_tokenize_str(text)], text


def test_category_table_matches_unicodedata():
    import unicodedata
    letters = onig_re.category_ranges(frozenset({"Lu", "Ll", "Lt", "Lm", "Lo"}))
    count = sum(b - a + 1 for a, b in letters)
    assert count == sum(chr(c).isalpha() for c in range(onig_re.MAX_CODE_POINT + 1))  # str.isalpha is exactly L
    assert all(unicodedata.category(chr(a))[0] == "L" and unicodedata.category(chr(b))[0] == "L" for a, b in letters)


@pytest.mark.parametrize("pattern, message", [
    (r"\p{Han}+", r"the Unicode property \p{Han} is not supported (slm reads general categories"),
    (r"\w+", r"\w is not supported (Oniguruma's word characters"),
    (r"[\W]", r"\W is not supported"),
    (r"\bx", r"\b is not supported"),
    (r"[a[b]]", "a nested character class is not supported"),
    (r"[a&&b]", "a class intersection '&&' is not supported"),
    (r"\k<n>", r"the escape \k is not supported"),
    (r"\G", r"the escape \G is not supported"),
    (r"a)", "an unbalanced ')'"),
    (r"(a", "an unclosed '('"),
    (r"[ab", "an unclosed '['"),
    (r"\p", r"\p without a {name}"),
    (r"(?<=a|bc)x", "look-behind requires fixed-width pattern"),
    (r"(?i)aß", "case-insensitive 'aß' is not supported (Oniguruma matches it against"),
    (r"(?i:x|ss)", "case-insensitive 'ss' is not supported"),
    (r"a(?i)b|fi", "case-insensitive 'fi' is not supported"),
    (r"(?i)[ß]", "case-insensitive 'ß' is not supported"),
])
def test_what_cannot_be_translated_is_named(pattern, message):
    with pytest.raises(ValueError) as info:
        onig_re.compile_pattern(pattern)
    assert message in str(info.value) and repr(pattern) in str(info.value)
