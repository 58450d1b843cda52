"""Strings that stress a tokenizer or a regular expression, drawn reproducibly: the references of
tests/test_slm_bpe.py and tests/test_slm_onig_re.py compare slm with `tokenizers` on them."""

from __future__ import annotations

import random
import unicodedata

from testkit.trained_tokenizers import CORPUS


def sample_strings(n: int, seed: int, extra: tuple[str, ...] = ()) -> list[str]:
    """Strings that stress a tokenizer: corpus slices, random Unicode (letters, marks, digits, symbols, astral),
    emoji sequences, whitespace runs of every kind, apostrophes, and the added tokens in odd places."""
    rng = random.Random(seed)
    spaces = [" ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c", "\x1c", "\x85",
              "\u200b", "   \n  ", " \t "]
    pieces = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "''", "'", "don't", "it's", "x'y", "▁", "▁▁", "Ġ",
              "<0x41>", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "é", "e\u0301", "ﬁ", "İ", "ß", "123", "4.5", "½", "٣",
              "…", "—", "<", ">", "|", "#", "_", "__init__", "A", "Z", "ǅ", "\ufffd", "\U0001f9d1\u200d\U0001f4bb",
              "'LL", "'Re", "'VE", "'ſ", "'ß", "\u212a", "\r", "\r\n\r\n", " \r\n ", "1234567", "12,345.678", "٣٤٥٦",
              "²³", "Ⅻ", "日本語", "한국어", "!!!", "?!", "$", "+", "<=>", "^~|", "a/b", "\u0301", "ǈ", "x\u0308",
              *extra]
    corpus = CORPUS
    out = ["", " ", "a", "  ", "\n", " a", "a ", "  a  b  ", "\n\nx\n\n", CORPUS, *extra]
    while len(out) < n:
        kind = rng.randrange(6)
        if kind == 0:
            a = rng.randrange(len(corpus))
            out.append(corpus[a:a + rng.randrange(1, 80)])
        elif kind == 1:  # random code points, mostly assigned ones
            chars = []
            while len(chars) < rng.randrange(1, 20):
                c = chr(rng.choice([rng.randrange(32, 0x3000), rng.randrange(0x3000, 0xD800),
                                    rng.randrange(0xE000, 0x10000), rng.randrange(0x10000, 0x2FFFF)]))
                if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
                    chars.append(c)
            out.append("".join(chars))
        else:  # a mix of pieces, words and spaces
            parts = []
            for _ in range(rng.randrange(1, 12)):
                parts.append(rng.choice([rng.choice(spaces), rng.choice(pieces), rng.choice(corpus.split()),
                                         str(rng.randrange(10 ** rng.randrange(1, 8)))]))
            out.append("".join(parts))
    return out
