def _first_stop(text: str, stops: list[str]):
    hits = [(text.find(s), i) for i, s in enumerate(stops) if s and s in text]
    return min(hits) if hits else None


def _held(text: str, stops: list[str]) -> int:
    """Length of the longest tail of text that is a proper prefix of a stop string."""
    best = 0
    for s in stops:
        for k in range(1, min(len(s) - 1, len(text)) + 1):
            if text.endswith(s[:k]):
                best = max(best, k)
    return best


def stream_with_stops(pieces: list[str], stops: list[str]) -> tuple[list[str], str | None]:
    out, pending = [], ""
    for piece in pieces:
        pending += piece
        hit = _first_stop(pending, stops)
        if hit is not None:
            at, which = hit
            out.append(pending[:at])
            return out, stops[which]
        keep = len(pending) - _held(pending, stops)
        out.append(pending[:keep])
        pending = pending[keep:]
    out.append(pending)
    return out, None
