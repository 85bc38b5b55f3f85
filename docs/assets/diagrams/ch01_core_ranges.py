"""Draws ch01_core_ranges.svg: the three ranges of one request over its life (chapter 1).

    python docs/assets/diagrams/ch01_core_ranges.py

The request is the one of chapter 1's example: a 6-token prompt, max_tokens=4.
"""

from pathlib import Path

PROMPT, MAX_TOKENS = 6, 4
TOTAL = PROMPT + MAX_TOKENS
CELL, GAP, LEFT, TOP, ROW = 46, 4, 170, 58, 62
COLORS = {"cached": "#4caf50", "extend": "#ff9800", "future": "#ffffff"}
TOKENS = [101, 7, 42, 42, 9, 13, 500, 501, 502, 503]

# (label, cached_len, device_len): the state before each forward pass, then the final state.
STATES = [("admitted", 0, 6), ("after prefill", 6, 7), ("after decode 1", 7, 8),
          ("after decode 2", 8, 9), ("after decode 3: done", 9, 10)]


def x_of(pos: int) -> int:
    return LEFT + pos * (CELL + GAP)


def main() -> None:
    width = x_of(TOTAL) + 170
    height = TOP + ROW * len(STATES) + 96
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>']
    # position numbers
    for pos in range(TOTAL):
        out.append(f'<text x="{x_of(pos) + CELL / 2}" y="{TOP - 14}" text-anchor="middle" fill="#555">{pos}</text>')
    out.append(f'<text x="{LEFT - 12}" y="{TOP - 14}" text-anchor="end" fill="#555">position</text>')
    for row, (label, cached, device) in enumerate(STATES):
        y = TOP + row * ROW
        out.append(f'<text x="{LEFT - 12}" y="{y + 27}" text-anchor="end" font-weight="bold">{label}</text>')
        for pos in range(TOTAL):
            kind = "cached" if pos < cached else "extend" if pos < device else "future"
            dash = ' stroke-dasharray="4 3"' if kind == "future" else ""
            out.append(f'<rect x="{x_of(pos)}" y="{y}" width="{CELL}" height="38" rx="4" '
                       f'fill="{COLORS[kind]}" stroke="#333"{dash}/>')
            if pos < device:
                out.append(f'<text x="{x_of(pos) + CELL / 2}" y="{y + 24}" text-anchor="middle" '
                           f'fill="{"#fff" if kind == "cached" else "#000"}">{TOKENS[pos]}</text>')
        extend, remain = device - cached, TOTAL - device
        out.append(f'<text x="{x_of(TOTAL) + 8}" y="{y + 17}" fill="#333">cached {cached}, device {device}</text>')
        out.append(f'<text x="{x_of(TOTAL) + 8}" y="{y + 33}" fill="#333">extend {extend}, remain {remain}</text>')
    # the prompt / output brace
    y = TOP + ROW * len(STATES) - 8
    for start, end, text in ((0, PROMPT, "prompt"), (PROMPT, TOTAL, "output (max_tokens = 4)")):
        x0, x1 = x_of(start), x_of(end) - GAP
        out.append(f'<path d="M{x0} {y} v6 H{x1} v-6" fill="none" stroke="#333"/>')
        out.append(f'<text x="{(x0 + x1) / 2}" y="{y + 22}" text-anchor="middle">{text}</text>')
    # legend, two lines
    items = [("cached", "[0, cached_len): K/V already in the cache"),
             ("extend", "[cached_len, device_len): computed by the next forward pass"),
             ("future", "[device_len, max_device_len): not generated yet")]
    for i, (kind, text) in enumerate(items):
        x, y = (20, height - 46) if i < 2 else (20, height - 20)
        if i == 1:
            x = 20 + 360
        dash = ' stroke-dasharray="4 3"' if kind == "future" else ""
        out.append(f'<rect x="{x}" y="{y - 12}" width="16" height="16" rx="3" fill="{COLORS[kind]}" stroke="#333"{dash}/>')
        out.append(f'<text x="{x + 22}" y="{y + 1}">{text}</text>')
    out.append("</svg>")
    Path(__file__).with_suffix(".svg").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
