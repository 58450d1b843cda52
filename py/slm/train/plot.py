"""The loss curve as a small PNG drawn with NumPy and zlib only (no plotting library), plus an optional Bokeh
HTML page (bokeh is used only if installed, with CDN resources so the file stays a few kB)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

# A 3x5 pixel font for the labels: each glyph is five rows of three bits.
_FONT = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", " ": "000000000000000",
    "a": "000011101101011", "d": "001001111101111", "e": "000111111100111", "g": "000111101011110",
    "i": "010000010010010", "l": "010010010010010", "m": "000111111101101", "n": "000110101101101",
    "o": "000111101101111", "p": "000111101111100", "r": "000111100100100", "s": "000111110011111",
    "t": "010111010010011", "u": "000101101101111", "v": "000101101101010", "(": "010100100100010",
    ")": "010001001001010", "k": "100101110101101", "c": "000111100100111", "-": "000000111000000",
    "h": "100100111101101", "/": "001001010100100", "x": "000101010101101",
}
WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (170, 170, 170)
BLUE, LIGHT_BLUE, ORANGE = (31, 119, 180), (190, 215, 235), (230, 110, 20)


def _text(img: np.ndarray, x: int, y: int, text: str, color=BLACK, scale: int = 2) -> None:
    for ch in text:
        bits = _FONT.get(ch, _FONT[" "])
        for r in range(5):
            for c in range(3):
                if bits[r * 3 + c] == "1":
                    img[y + r * scale: y + (r + 1) * scale, x + c * scale: x + (c + 1) * scale] = color
        x += 4 * scale


def _polyline(img: np.ndarray, xs: np.ndarray, ys: np.ndarray, color, width: int = 2, dash: int = 0) -> None:
    pts_x, pts_y = [], []
    for i in range(len(xs) - 1):
        n = int(max(abs(xs[i + 1] - xs[i]), abs(ys[i + 1] - ys[i]))) + 1
        pts_x.append(np.linspace(xs[i], xs[i + 1], n))
        pts_y.append(np.linspace(ys[i], ys[i + 1], n))
    if not pts_x:
        return
    px, py = np.concatenate(pts_x).round().astype(int), np.concatenate(pts_y).round().astype(int)
    if dash:
        keep = (np.arange(px.size) // dash) % 2 == 0
        px, py = px[keep], py[keep]
    h, w = img.shape[:2]
    for dx in range(width):
        for dy in range(width):
            ok = (px + dx < w) & (py + dy < h)
            img[py[ok] + dy, px[ok] + dx] = color


def _png(img: np.ndarray) -> bytes:
    h, w = img.shape[:2]
    raw = b"".join(b"\x00" + img[r].astype(np.uint8).tobytes() for r in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def smooth(values: list[float], window: int = 50) -> np.ndarray:
    """A trailing moving average (the first points average what there is)."""
    v = np.asarray(values, dtype=float)
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, v.size + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def loss_curve_png(curve: dict, path: str | Path, width: int = 720, height: int = 420) -> None:
    """Training loss (raw, light; smoothed, blue), validation loss (orange) and the unigram baseline (grey,
    dashed) against the step, in nats per token."""
    img = np.full((height, width, 3), WHITE, dtype=np.uint8)
    left, right, top, bottom = 60, 20, 40, 50
    steps = np.asarray(curve["step"], dtype=float)
    x_max = float(steps.max()) if steps.size else 1.0
    y_max = float(np.ceil(max(curve["unigram_loss"], np.percentile(curve["train_loss"][:20], 50)) + 0.5))

    def to_px(x, y):
        px = left + np.asarray(x, dtype=float) / x_max * (width - left - right)
        py = top + (1 - np.clip(np.asarray(y, dtype=float), 0, y_max) / y_max) * (height - top - bottom)
        return px, py

    for yv in range(int(y_max) + 1):  # horizontal grid and y labels
        _, py = to_px([0], [yv])
        _polyline(img, np.array([left, width - right]), np.array([py[0], py[0]]), (230, 230, 230), 1)
        _text(img, left - 14, int(py[0]) - 5, str(yv))
    for i in range(5):  # x labels
        xv = int(round(x_max * i / 4))
        px, _ = to_px([xv], [0])
        _text(img, int(px[0]) - 4 * len(str(xv)), height - bottom + 8, str(xv))
    _polyline(img, np.array([left, left, width - right]), np.array([top, height - bottom, height - bottom]), BLACK, 1)
    _text(img, width // 2 - 20, height - 22, "step")
    _text(img, 6, 12, "loss (nats/token)")

    _polyline(img, *to_px(steps, curve["train_loss"]), LIGHT_BLUE, 1)
    _polyline(img, *to_px(steps, smooth(curve["train_loss"])), BLUE, 2)
    _polyline(img, *to_px([0, x_max], [curve["unigram_loss"]] * 2), GREY, 2, dash=8)
    if curve["valid_step"]:
        _polyline(img, *to_px(curve["valid_step"], curve["valid_loss"]), ORANGE, 3)
    legend = (("train", BLUE), ("valid", ORANGE), ("unigram", GREY))
    x = width - right - 330
    for label, color in legend:
        img[14:20, x: x + 20] = color
        _text(img, x + 26, 12, label)
        x += 110
    Path(path).write_bytes(_png(img))


def loss_curve_html(curve: dict, path: str | Path) -> bool:
    """An interactive Bokeh page of the same curves (CDN resources: needs a network to display). Returns
    False, writing nothing, if bokeh is not installed."""
    try:
        from bokeh.embed import file_html
        from bokeh.models import Span
        from bokeh.plotting import figure
        from bokeh.resources import CDN
    except ImportError:
        return False
    fig = figure(width=800, height=450, title="slm shipped model: loss (nats per token)",
                 x_axis_label="step", y_axis_label="cross-entropy (nats)")
    every = max(1, len(curve["step"]) // 1000)  # at most ~1000 points a line: a small page
    steps = curve["step"][::every]
    fig.line(steps, curve["train_loss"][::every], color="#bed7eb", legend_label=f"train (every {every}th batch)")
    fig.line(steps, [round(v, 4) for v in smooth(curve["train_loss"])[::every].tolist()], color="#1f77b4",
             line_width=2, legend_label="train (mean of 50)")
    fig.line(curve["valid_step"], curve["valid_loss"], color="#e66e14", line_width=3, legend_label="validation")
    fig.scatter(curve["valid_step"], curve["valid_loss"], color="#e66e14", size=5)
    fig.add_layout(Span(location=curve["unigram_loss"], dimension="width", line_dash="dashed", line_color="grey"))
    fig.line([], [], color="grey", line_dash="dashed", legend_label=f"unigram baseline {curve['unigram_loss']:.2f}")
    Path(path).write_text(file_html(fig, CDN, "slm loss curve"), encoding="utf-8")
    return True
