"""Byte-pair-encoding tokenizers read from a Hugging Face `tokenizer.json`, in pure Python (no `regex`, no
`tokenizers`: the code must run in Pyodide with the standard library and NumPy only).

Two families load: byte-level BPE (every byte is a symbol: GPT-2, Llama 3, Qwen2, SmolLM) and SentencePiece-style
BPE with byte fallback (Llama: spaces become `▁`, a character missing from the vocabulary becomes its UTF-8 bytes as
`<0xNN>` tokens). GPT-2's `vocab.json` + `merges.txt` load too (`from_gpt2_files`). Encoding follows the
`tokenizers` library's steps: added tokens are cut out first, then normalizer, pre-tokenizer, BPE merges by rank,
post-processor (e.g. Llama's BOS). The pre-tokenizers are ByteLevel (GPT-2's split, by hand in `gpt2_split`),
Metaspace, Digits, Split (a regex, read by `slm.onig_re`, or a string) and Sequence. A component this module does
not implement is a ValueError naming it, never a silently different encoding.

GGUF files name their byte-level BPE's split rules in `tokenizer.ggml.pre` with llama.cpp's names.
`pre_tokenizer_for_gguf(name)` gives, for a known name, a new dict:
`{"normalizer": ..., "pre_tokenizer": ..., "ignore_merges": bool, "add_bos": bool}` -- the first two go into a
tokenizer.json dict as they are, `ignore_merges` into its `model`, and `add_bos` is llama.cpp's default for a file
without `tokenizer.ggml.add_bos_token`. A file without `tokenizer.ggml.pre` is "default" to llama.cpp; an unknown
name is a ValueError naming it.
"""

from __future__ import annotations

import heapq
import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from . import onig_re
from .onig_re import WHITESPACE
from .tokenizer import KINDS, Encoding

METASPACE = "▁"

LETTER, NUMBER, SPACE, OTHER = 0, 1, 2, 3
_CLASS_OF_CATEGORY = {"L": LETTER, "N": NUMBER}
_char_classes: dict[str, int] = {}
CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")  # after an apostrophe, in the pattern's order


def _char_class(c: str) -> int:
    cls = _char_classes.get(c)
    if cls is None:
        cls = SPACE if c in WHITESPACE else _CLASS_OF_CATEGORY.get(unicodedata.category(c)[0], OTHER)
        _char_classes[c] = cls
    return cls


def gpt2_split(text: str) -> list[str]:
    """GPT-2's pre-tokenizer pattern
    `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+` as a hand-written scanner:
    each piece is what that pattern matches at the current position. The pieces join back to the text."""
    classes = [_char_class(c) for c in text]
    n, i, out = len(text), 0, []
    while i < n:
        c = text[i]
        if c == "'" and i + 1 < n:
            suffix = next((s for s in CONTRACTIONS if text.startswith(s, i + 1)), None)
            if suffix is not None:
                out.append(text[i:i + 1 + len(suffix)])
                i += 1 + len(suffix)
                continue
        start, cls = i, classes[i]
        if c == " " and i + 1 < n and classes[i + 1] != SPACE:  # the optional space joins the run after it
            i += 1
            cls = classes[i]
        if cls != SPACE:  # a run of letters, of digits, or of anything else
            j = i + 1
            while j < n and classes[j] == cls:
                j += 1
            out.append(text[start:j])
            i = j
            continue
        j = i + 1
        while j < n and classes[j] == SPACE:
            j += 1
        # `\s+(?!\S)`: a run of spaces before a visible character leaves its last space to that character's piece
        end = j if j == n or j - i == 1 else j - 1
        out.append(text[i:end])
        i = end
    return out


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the other 68 bytes are shifted
    to U+0100.. so that every token is a string of visible characters (the space byte is `Ġ`, newline `Ċ`)."""
    visible = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, shifted = {}, 0
    for b in range(256):
        if b in visible:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + shifted)
            shifted += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
_BYTE_PIECE = [BYTE_TO_CHAR[b] for b in range(256)]
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _unsupported(what: str, value: Any) -> ValueError:
    shown = value.get("type") if isinstance(value, dict) else value
    return ValueError(f"tokenizer.json: {what} {shown!r} is not supported (slm reads byte-level BPE as GPT-2's and "
                      "SentencePiece-style BPE with byte fallback as Llama's)")


# ---- normalizers, pre-tokenizers, post-processors and decoders: each a small function of plain strings ----

def _normalizer(spec: Any):
    if spec is None:
        return None
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "Sequence":
        steps = [_normalizer(s) for s in spec["normalizers"]]
        steps = [s for s in steps if s is not None]

        def sequence(text: str) -> str:
            for step in steps:
                text = step(text)
            return text
        return sequence
    if kind == "Prepend":
        prefix = spec["prepend"]
        return lambda text: prefix + text if text else text
    if kind == "Replace":
        pattern, content = spec["pattern"], spec["content"]
        if not isinstance(pattern, dict) or "String" not in pattern:
            raise _unsupported("normalizer Replace with the pattern", json.dumps(pattern))
        old = pattern["String"]
        return lambda text: text.replace(old, content)
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return lambda text: unicodedata.normalize(kind, text)
    raise _unsupported("normalizer", spec)


Piece = tuple[str, bool]  # a piece of text and whether it starts the original text (Metaspace's "first" scheme)


def _pre_tokenizer(spec: Any):
    """A function from a list of pieces to a finer list of pieces; empty pieces are dropped, as `tokenizers` does."""
    if spec is None:
        return lambda pieces: pieces
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "Sequence":
        steps = [_pre_tokenizer(s) for s in spec["pretokenizers"]]

        def sequence(pieces: list[Piece]) -> list[Piece]:
            for step in steps:
                pieces = step(pieces)
            return pieces
        return sequence
    if kind == "ByteLevel":
        prefix_space, use_regex = spec.get("add_prefix_space", True), spec.get("use_regex", True)

        def byte_level(pieces: list[Piece]) -> list[Piece]:
            out = []
            for text, first in pieces:
                if prefix_space and not text.startswith(" "):
                    text = " " + text
                for j, part in enumerate(gpt2_split(text) if use_regex else [text]):
                    out.append(("".join(_BYTE_PIECE[b] for b in part.encode("utf-8")), first and j == 0))
            return out
        return byte_level
    if kind == "Metaspace":
        replacement = spec["replacement"]
        scheme = spec.get("prepend_scheme", "always")
        if spec.get("add_prefix_space") is False:
            scheme = "never"
        split = spec.get("split", True)
        if scheme not in ("always", "first", "never"):
            raise _unsupported("Metaspace prepend_scheme", scheme)

        def metaspace(pieces: list[Piece]) -> list[Piece]:
            out = []
            for text, first in pieces:
                text = text.replace(" ", replacement)
                if text and not text.startswith(replacement) and (scheme == "always" or (scheme == "first" and first)):
                    text = replacement + text
                if not split:
                    out.append((text, first))
                    continue
                starts = [0] + [i for i, c in enumerate(text) if c == replacement and i > 0]
                out += [(text[a:b], first and a == 0) for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
            return [(text, first) for text, first in out if text]
        return metaspace
    if kind == "Split":
        return _split_step(spec)
    if kind == "Digits":
        individual = bool(spec.get("individual_digits", False))
        return _splitter(_numeric_spans, "Isolated" if individual else "Contiguous", invert=False)
    raise _unsupported("pre-tokenizer", spec)


SPLIT_BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def _split_step(spec: dict[str, Any]):
    pattern, behavior = spec["pattern"], spec["behavior"]
    if behavior not in SPLIT_BEHAVIORS:
        raise _unsupported("Split behavior", behavior)
    if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
        try:
            compiled = onig_re.compile_pattern(pattern["Regex"])
        except ValueError as exc:
            raise ValueError(f"tokenizer.json: pre-tokenizer Split: {exc}") from None
    elif isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
        compiled = re.compile(re.escape(pattern["String"]))
    else:
        raise _unsupported("Split pattern", json.dumps(pattern))
    return _splitter(lambda text: onig_re.find_spans(compiled, text), behavior, bool(spec.get("invert", False)))


def _numeric_spans(text: str) -> list[tuple[int, int]]:
    """Each character of a number category on its own (Rust's `char::is_numeric`, which `Digits` splits on)."""
    return [(i, i + 1) for i, c in enumerate(text) if _char_class(c) == NUMBER]


def _splitter(find, behavior: str, invert: bool):
    """A pre-tokenizer step cutting each piece around the spans `find(text)` gives, as `tokenizers` splits a string
    with a pattern: the matches and the text between them, then the behavior decides what is kept and merged."""
    def split(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, first in pieces:
            for a, b in _cut(text, find(text) if text else [], behavior, invert):
                out.append((text[a:b], first and a == 0))
        return out
    return split


def _cut(text: str, spans: list[tuple[int, int]], behavior: str, invert: bool) -> list[tuple[int, int]]:
    parts: list[tuple[int, int, bool]] = []  # (start, end, is a match), covering the text
    done = 0
    for a, b in spans:
        if done != a:
            parts.append((done, a, invert))
        parts.append((a, b, not invert))
        done = b
    if done != len(text) or not text:
        parts.append((done, len(text), invert))
    if behavior == "Isolated":
        kept = [(a, b) for a, b, _ in parts]
    elif behavior == "Removed":
        kept = [(a, b) for a, b, match in parts if not match]
    elif behavior == "MergedWithNext":  # the mirror image of MergedWithPrevious
        n = len(text)
        mirrored = [(n - b, n - a, match) for a, b, match in reversed(parts)]
        kept = [(n - b, n - a) for a, b in reversed(_merge_matches(mirrored, contiguous=False))]
    else:
        kept = _merge_matches(parts, contiguous=behavior == "Contiguous")
    return [(a, b) for a, b in kept if a < b]


def _merge_matches(parts: list[tuple[int, int, bool]], contiguous: bool) -> list[tuple[int, int]]:
    """MergedWithPrevious: a match joins the piece before it unless that piece is a match itself. Contiguous: each
    run of matches, and each run of non-matches, becomes one piece."""
    kept: list[tuple[int, int]] = []
    previous = False
    for a, b, match in parts:
        joins = match == previous if contiguous else match and not previous
        if joins and kept:
            kept[-1] = (kept[-1][0], b)
        else:
            kept.append((a, b))
        previous = match
    return kept


def _post_processor(spec: Any):
    """The ids the post-processor puts around one sequence: (before, after)."""
    if spec is None:
        return [], []
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "ByteLevel":
        return [], []  # it only trims offsets
    if kind == "Sequence":
        before, after = [], []
        for step in spec["processors"]:
            b, a = _post_processor(step)
            before, after = before + b, a + after
        return before, after
    if kind == "TemplateProcessing":
        before, after, seen = [], [], False
        for item in spec["single"]:
            if "Sequence" in item:
                seen = True
            elif "SpecialToken" in item:
                ids = spec["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                (after if seen else before).extend(ids)
            else:
                raise _unsupported("TemplateProcessing item", json.dumps(item))
        return before, after
    raise _unsupported("post-processor", spec)


def _utf8_lossy(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _decoder(spec: Any):
    """A function from the list of token strings to the list of decoded strings (joined by the caller)."""
    if spec is None:
        return lambda tokens: [" ".join(tokens)]
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "Sequence":
        steps = [_decoder(s) for s in spec["decoders"]]

        def sequence(tokens: list[str]) -> list[str]:
            for step in steps:
                tokens = step(tokens)
            return tokens
        return sequence
    if kind == "ByteLevel":
        def byte_level(tokens: list[str]) -> list[str]:
            data = bytearray()
            for token in tokens:
                if all(c in CHAR_TO_BYTE for c in token):
                    data.extend(CHAR_TO_BYTE[c] for c in token)
                else:  # an added token written in plain text
                    data.extend(token.encode("utf-8"))
            return [_utf8_lossy(bytes(data))]
        return byte_level
    if kind == "Metaspace":
        replacement = spec["replacement"]
        scheme = "never" if spec.get("add_prefix_space") is False else spec.get("prepend_scheme", "always")

        def metaspace(tokens: list[str]) -> list[str]:
            out = [t.replace(replacement, " ") for t in tokens]
            if out and scheme != "never":
                out[0] = tokens[0].replace(replacement, "")  # the space the pre-tokenizer added is not text
            return out
        return metaspace
    if kind == "Replace":
        pattern = spec["pattern"]
        if not isinstance(pattern, dict) or "String" not in pattern:
            raise _unsupported("decoder Replace with the pattern", json.dumps(pattern))
        old, new = pattern["String"], spec["content"]
        return lambda tokens: [t.replace(old, new) for t in tokens]
    if kind == "ByteFallback":
        def byte_fallback(tokens: list[str]) -> list[str]:
            out: list[str] = []
            pending = bytearray()
            for token in [*tokens, None]:
                match = _BYTE_TOKEN.fullmatch(token) if token is not None else None
                if match:
                    pending.append(int(match.group(1), 16))
                    continue
                if pending:
                    try:
                        out.append(pending.decode("utf-8"))
                    except UnicodeDecodeError:  # as `tokenizers`: one replacement character per byte
                        out.extend("\ufffd" * len(pending))
                    pending.clear()
                if token is not None:
                    out.append(token)
            return out
        return byte_fallback
    if kind == "Fuse":
        return lambda tokens: ["".join(tokens)]
    if kind == "Strip":
        content, start, stop = spec["content"], spec["start"], spec["stop"]

        def strip(tokens: list[str]) -> list[str]:
            out = []
            for token in tokens:
                a = 0
                while a < min(start, len(token)) and token[a] == content:
                    a += 1
                b = len(token)
                for _ in range(stop):
                    if b > a and token[b - 1] == content:
                        b -= 1
                    else:
                        break
                out.append(token[a:b])
            return out
        return strip
    raise _unsupported("decoder", spec)


# ---- the BPE model ----

class _BPEModel:
    """Token ids of one pre-tokenized piece: characters (or their bytes) as symbols, then the lowest-ranked
    adjacent pair merged until none is left (ties: leftmost first), as `tokenizers` does."""

    def __init__(self, spec: dict[str, Any]) -> None:
        if spec.get("type", "BPE") != "BPE":
            raise _unsupported("model type", spec.get("type"))
        for option in ("continuing_subword_prefix", "end_of_word_suffix"):
            if spec.get(option):
                raise _unsupported(f"BPE option {option}", spec[option])
        if spec.get("dropout"):
            raise _unsupported("BPE option dropout", spec["dropout"])
        self.vocab: dict[str, int] = dict(spec["vocab"])
        self.byte_fallback = bool(spec.get("byte_fallback", False))
        self.fuse_unk = bool(spec.get("fuse_unk", False))
        self.ignore_merges = bool(spec.get("ignore_merges", False))
        self.unk_id = self.vocab.get(spec["unk_token"]) if spec.get("unk_token") is not None else None
        if spec.get("unk_token") is not None and self.unk_id is None:
            raise ValueError(f"tokenizer.json: the unk_token {spec['unk_token']!r} is not in the vocabulary")
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, merge in enumerate(spec.get("merges", [])):
            left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
            try:
                pair, new = (self.vocab[left], self.vocab[right]), self.vocab[left + right]
            except KeyError as exc:
                raise ValueError(f"tokenizer.json: the merge {left!r} + {right!r} names a token missing from the "
                                 f"vocabulary ({exc})") from None
            self.merges.setdefault(pair, (rank, new))
        self.byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        # A piece may be cut before every `▁` that follows another character when no token holds a `▁` after
        # another character: no merge can then join across such a cut, so the cut pieces encode the same, and a
        # long Llama segment (one piece when the pre-tokenizer does not split) becomes many short cacheable ones.
        self.cut_at_metaspace = not any(METASPACE in t.lstrip(METASPACE) for t in self.vocab)
        self._symbols: dict[str, list[int] | None] = {}
        self._cache: dict[str, tuple[list[int], list[str]]] = {}

    def _char_ids(self, c: str) -> list[int] | None:
        """The symbols of one character: its own id, its bytes' ids (byte fallback), or None (unknown)."""
        if c not in self._symbols:
            if c in self.vocab:
                ids = [self.vocab[c]]
            else:
                ids = [self.byte_ids[b] for b in c.encode("utf-8")] if self.byte_fallback else [None]
                ids = None if None in ids else ids
            self._symbols[c] = ids
        return self._symbols[c]

    def encode(self, piece: str, unknown: list[str]) -> list[int]:
        if self.cut_at_metaspace and METASPACE in piece[1:]:
            cuts = [0] + [i for i in range(1, len(piece)) if piece[i] == METASPACE and piece[i - 1] != METASPACE]
            ids = []
            for a, b in zip(cuts, [*cuts[1:], len(piece)], strict=True):
                ids += self._encode_word(piece[a:b], unknown)
            return ids
        return self._encode_word(piece, unknown)

    def _encode_word(self, word: str, unknown: list[str]) -> list[int]:
        hit = self._cache.get(word)
        if hit is None:
            hit = self._cache[word] = self._merge_word(word)
        unknown += hit[1]
        return hit[0]

    def _merge_word(self, word: str) -> tuple[list[int], list[str]]:
        """The word's ids and its runs of characters that became the unknown token."""
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]], []
        symbols: list[int] = []
        unknown: list[str] = []
        after_unk = False
        for c in word:
            ids = self._char_ids(c)
            if ids is not None:
                symbols += ids
                after_unk = False
            elif self.unk_id is not None:  # without an unk token the character is dropped, as in `tokenizers`
                if after_unk:
                    unknown[-1] += c
                else:
                    unknown.append(c)
                if not (self.fuse_unk and after_unk):
                    symbols.append(self.unk_id)
                after_unk = True
        return self._merge(symbols), unknown

    def _merge(self, symbols: list[int]) -> list[int]:
        n = len(symbols)
        if n < 2:
            return symbols
        merges = self.merges
        sym: list[int | None] = list(symbols)
        nxt = [*range(1, n), -1]
        prv = list(range(-1, n - 1))
        heap = [(m[0], i, m[1]) for i in range(n - 1) if (m := merges.get((symbols[i], symbols[i + 1])))]
        heapq.heapify(heap)
        while heap:
            _, pos, new = heapq.heappop(heap)
            right = nxt[pos]
            if sym[pos] is None or right == -1:
                continue
            merge = merges.get((sym[pos], sym[right]))
            if merge is None or merge[1] != new:  # a stale entry: one of its symbols has merged since
                continue
            sym[pos], sym[right] = new, None
            nxt[pos] = nxt[right]
            if nxt[pos] != -1:
                prv[nxt[pos]] = pos
            if prv[pos] != -1 and (m := merges.get((sym[prv[pos]], new))):
                heapq.heappush(heap, (m[0], prv[pos], m[1]))
            if nxt[pos] != -1 and (m := merges.get((new, sym[nxt[pos]]))):
                heapq.heappush(heap, (m[0], pos, m[1]))
        return [s for s in sym if s is not None]


# ---- the tokenizer ----

class BPETokenizer:
    """A BPE tokenizer described by a `tokenizer.json` object (the dict `json.load` gives).

    `encode(text)` adds the post-processor's tokens (Llama's BOS) unless `add_special_tokens=False`; `decode(ids)`
    keeps special tokens unless `skip_special_tokens=True` (as `transformers` does)."""

    def __init__(self, data: dict[str, Any]) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            raise ValueError("tokenizer.json: not a tokenizer description (no 'model' object)")
        try:
            self._build(data)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"tokenizer.json: a missing or malformed field ({exc!r})") from None

    def _build(self, data: dict[str, Any]) -> None:
        self.data = data
        self.model = _BPEModel(data["model"])
        self.normalize = _normalizer(data.get("normalizer"))
        self.pre_tokenize = _pre_tokenizer(data.get("pre_tokenizer"))
        self.bos_ids, self.eos_ids = _post_processor(data.get("post_processor"))
        self._decode_chain = _decoder(data.get("decoder"))
        self.truncation, self.padding = data.get("truncation"), data.get("padding")

        tokens = {i: t for t, i in self.model.vocab.items()}
        self.special_ids: set[int] = set()
        raw, normalized = {}, {}  # added token text -> id, matched on the raw and on the normalized text
        self._added: dict[int, dict[str, Any]] = {}
        for added in data.get("added_tokens") or []:
            i, content = int(added["id"]), added["content"]
            if not content:
                continue
            self._added[i] = added
            if added.get("special"):
                self.special_ids.add(i)
            if added.get("normalized", not added.get("special")):
                # matched after normalization, so in its normalized form (which is also how it decodes)
                content = self.normalize(content) if self.normalize is not None else content
                normalized[content] = i
            else:
                raw[content] = i
            tokens[i] = content
        self._raw_added = _Matcher.of(raw)
        self._normalized_added = _Matcher.of(normalized)
        self.vocab: list[str] = [""] * (max(tokens) + 1 if tokens else 0)
        for i, t in tokens.items():
            self.vocab[i] = t
        self._known = tokens
        decoders = _components(data.get("decoder"), "decoders")
        types = {d.get("type") for d in decoders}
        self._byte_level = "ByteLevel" in types
        spaces = [d["replacement"] for d in decoders if d.get("type") == "Metaspace"]
        spaces += [d["pattern"]["String"] for d in decoders if d.get("type") == "Replace" and d.get("content") == " "]
        self._space = spaces[0] if spaces else None  # the character that stands for a space (Llama's `▁`)

    def __len__(self) -> int:
        return len(self.vocab)

    # ---- encoding ----

    def _split_added(self, text: str, matcher: _Matcher | None) -> list[tuple[str, int | None, int]]:
        """The text cut around the added tokens it contains: (text, id or None, start offset)."""
        if matcher is None:
            return [(text, None, 0)]
        out, done = [], 0
        for match in matcher.pattern.finditer(text):
            start, stop = match.span()
            added_id = matcher.ids[match.group()]
            spec = self._added[added_id]
            if spec.get("single_word") and ((start > 0 and _is_word_char(text[start - 1]))
                                             or (stop < len(text) and _is_word_char(text[stop]))):
                continue
            if spec.get("lstrip"):
                while start > done and text[start - 1] in WHITESPACE:
                    start -= 1
            if spec.get("rstrip"):
                while stop < len(text) and text[stop] in WHITESPACE:
                    stop += 1
            if done < start:
                out.append((text[done:start], None, done))
            out.append((text[start:stop], added_id, start))
            done = stop
        if done < len(text):
            out.append((text[done:], None, done))
        return out

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        ids: list[int] = []
        unknown: list[str] = []
        for segment, added_id, start in self._split_added(text, self._raw_added):
            if added_id is not None:
                ids.append(added_id)
                continue
            if self.normalize is not None:
                segment = self.normalize(segment)
            for part, part_id, offset in self._split_added(segment, self._normalized_added):
                if part_id is not None:
                    ids.append(part_id)
                    continue
                if not part:
                    continue
                for piece, _ in self.pre_tokenize([(part, start == 0 and offset == 0)]):
                    ids += self.model.encode(piece, unknown)
        if add_special_tokens:
            ids = [*self.bos_ids, *ids, *self.eos_ids]
        return Encoding(ids, unknown)

    # ---- decoding and display ----

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        tokens = [self._known[i] for i in map(int, ids)
                  if i in self._known and not (skip_special_tokens and i in self.special_ids)]
        return "".join(self._decode_chain(tokens))

    def token_text(self, i: int) -> str:
        """The token as a reader should see it: GPT-2's `Ġ` and Llama's `▁` as spaces, `<0x0A>` and `Ċ` as `\\n`,
        a piece of a multi-byte character as `<0xE2>`, a token of spaces only as `␣`."""
        i = int(i)
        token = self._known.get(i)
        if token is None:
            return f"<id {i}>"
        if i in self._added:
            return _visible(token)
        if self._byte_level and all(c in CHAR_TO_BYTE for c in token):
            return _visible(_show_bytes(bytes(CHAR_TO_BYTE[c] for c in token)))
        match = _BYTE_TOKEN.fullmatch(token) if self.model.byte_fallback else None
        if match:
            return _visible(_show_bytes(bytes([int(match.group(1), 16)])))
        if self._space:
            token = token.replace(self._space, " ")
        return _visible(token)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "bpe", "tokenizer": self.data}


class _Matcher:
    """Leftmost-longest search for added tokens (a regex alternation, longest first, finds exactly that)."""

    def __init__(self, ids: dict[str, int]) -> None:
        self.ids = ids
        self.pattern = re.compile("|".join(re.escape(t) for t in sorted(ids, key=len, reverse=True)))

    @classmethod
    def of(cls, ids: dict[str, int]) -> _Matcher | None:
        return cls(ids) if ids else None


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_" or unicodedata.category(c)[0] == "M"


def _components(spec: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(spec, dict):
        return []
    if spec.get("type") == "Sequence":
        return [c for s in spec.get(key, []) for c in _components(s, key)]
    return [spec]


def _show_bytes(data: bytes) -> str:
    """Bytes as text, with each byte that is not part of a whole UTF-8 character shown as <0xNN>."""
    text = data.decode("utf-8", errors="surrogateescape")
    return "".join(f"<0x{ord(c) - 0xDC00:02X}>" if "\udc80" <= c <= "\udcff" else c for c in text)


_VISIBLE = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _visible(token: str) -> str:
    if token and token.strip(" ") == "":
        return "␣" * len(token)
    return "".join(_VISIBLE.get(c, c) for c in token)


# ---- GPT-2's vocab.json + merges.txt ----

def from_gpt2_files(vocab_json: str | bytes, merges_txt: str | bytes) -> BPETokenizer:
    """GPT-2's tokenizer from its `vocab.json` (token -> id) and `merges.txt` (one "left right" pair a line, a
    `#version` line first), as the tokenizer.json object `tokenizers` would write for it."""
    try:
        vocab = json.loads(vocab_json)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"vocab.json is not valid JSON: {exc}") from None
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ValueError("vocab.json must map each token to its integer id")
    if isinstance(merges_txt, bytes):
        merges_txt = merges_txt.decode("utf-8")
    merges = []
    for n, line in enumerate(merges_txt.splitlines(), 1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"merges.txt line {n}: expected two tokens separated by a space, got {line!r}")
        merges.append(parts)
    special = [t for t in ("<|endoftext|>",) if t in vocab]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return BPETokenizer({
        "version": "1.0",
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t in special],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    })


def from_tokenizer_json(text: str | bytes) -> BPETokenizer:
    """The tokenizer a `tokenizer.json` file's text describes."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"tokenizer.json is not valid JSON: {exc}") from None
    return BPETokenizer(data)



# ---- the pre-tokenizers that GGUF files name (`tokenizer.ggml.pre`) ----

# Split patterns as tokenizer.json files hold them (Oniguruma syntax).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                  r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
                  r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
                   r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's own lists of split patterns, for names whose rules only llama.cpp states (each pattern splits the
# pieces the one before it left, keeping the text between matches).
_LLAMA_CPP_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA_CPP_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _LLAMA_CPP_GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
_LLAMA_CPP_FALCON = (r"[\p{P}\$\+<=>\^~\|]+", _LLAMA_CPP_GPT2, r"[0-9][0-9][0-9]")
_CJK_HANGUL = "[一-龥ࠀ-一가-퟿]+"
_LLAMA_CPP_DEEPSEEK_LLM = (
    "[\r\n]",
    # (written with escapes where a character has a canonical equivalent that an editor could substitute)
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-"
    "\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎ"
    "ꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    _CJK_HANGUL,
    r"\p{N}+",
)
_LLAMA_CPP_DEEPSEEK_CODER = ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}")
_LLAMA_CPP_DEEPSEEK_V3 = (
    r"\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"""
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
)
_LLAMA_CPP_BLOOM = (r" ?[^(\s|.,!?…。，、।۔،)]+",)
_LLAMA_CPP_VIKING = (r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}")

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_BYTES_ONLY = {**_BYTE_LEVEL, "use_regex": False}


def _gguf_rule(*patterns: str, digits: bool = False, nfc: bool = False, ignore_merges: bool = False,
               add_bos: bool = False) -> dict[str, Any]:
    if patterns:
        steps = [{"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False} for p in patterns]
        pre = {"type": "Sequence", "pretokenizers": [*steps, _BYTES_ONLY]}
    elif digits:
        pre = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]}
    else:
        pre = _BYTE_LEVEL
    return {"normalizer": {"type": "NFC"} if nfc else None, "pre_tokenizer": pre, "ignore_merges": ignore_merges,
            "add_bos": add_bos}


# llama.cpp's names (src/llama-vocab.cpp) -> the rules of the tokenizer.json they were converted from. Where
# llama.cpp rewrote a tokenizer.json pattern for its own regex engine, the original it quotes is used.
_GGUF_PRE_GROUPS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("gpt-2", "phi-2", "mpt", "olmo", "jais", "roberta-bpe", "gigachat", "jina-es", "jina-de", "jina-v1-en",
      "jina-v2-es", "jina-v2-de", "jina-v2-code", "exaone4", "trillion"), _gguf_rule()),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"),
     _gguf_rule(LLAMA3_PATTERN, ignore_merges=True, add_bos=True)),
    (("dbrx", "smaug-bpe", "chatglm-bpe", "glm4"), _gguf_rule(LLAMA3_PATTERN)),
    (("qwen2", "deepseek-r1-qwen"), _gguf_rule(QWEN2_PATTERN, nfc=True)),
    (("stablelm2", "megrez"), _gguf_rule(QWEN2_PATTERN)),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"), _gguf_rule(digits=True)),
    (("gpt-4o", "llama4"), _gguf_rule(_GPT4O_PATTERN)),
    (("tekken",), _gguf_rule(_TEKKEN_PATTERN, ignore_merges=True, add_bos=True)),
    (("default",), _gguf_rule(*_LLAMA_CPP_DEFAULT)),
    (("falcon",), _gguf_rule(*_LLAMA_CPP_FALCON)),
    (("deepseek-llm",), _gguf_rule(*_LLAMA_CPP_DEEPSEEK_LLM)),
    (("deepseek-coder",), _gguf_rule(*_LLAMA_CPP_DEEPSEEK_CODER)),
    (("deepseek-v3",), _gguf_rule(*_LLAMA_CPP_DEEPSEEK_V3)),
    (("bloom", "poro-chat", "gpt3-finnish"), _gguf_rule(*_LLAMA_CPP_BLOOM)),
    (("viking",), _gguf_rule(*_LLAMA_CPP_VIKING)),
]
GGUF_PRE_TOKENIZERS: dict[str, dict[str, Any]] = {name: rule for names, rule in _GGUF_PRE_GROUPS for name in names}


def pre_tokenizer_for_gguf(name: str) -> dict[str, Any]:
    """The split rules a GGUF file's `tokenizer.ggml.pre` names, for its byte-level BPE (`tokenizer.ggml.model`
    "gpt2"), as the dict the module docstring describes."""
    rule = GGUF_PRE_TOKENIZERS.get(name)
    if rule is None:
        raise ValueError(f"GGUF: the pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported; slm reads "
                         f"{', '.join(sorted(GGUF_PRE_TOKENIZERS))}")
    return json.loads(json.dumps(rule))


KINDS["bpe"] = lambda data: BPETokenizer(data["tokenizer"])
