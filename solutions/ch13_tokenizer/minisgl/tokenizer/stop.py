"""Stop strings over a stream of text: where to cut, and how much to hold back until it is known not to be one."""

from __future__ import annotations

from collections.abc import Sequence


def scan_for_stop(text: str, stops: Sequence[str]) -> tuple[int, str | None]:
    """Scan the text not yet released. (n, stop): the earliest stop string (the first listed, if several start
    there) begins at n, so text[:n] is the last text of the stream. (n, None): no stop string occurs; text[:n] is
    safe to release, text[n:] is the longest tail that is the beginning of some stop string and must wait."""
    # TODO(ch13): find the earliest occurrence of any stop string in `text` (ties: the first in `stops`); if
    # there is none, hold back the longest suffix of `text` that is a proper prefix of some stop string.
    # >>> solution
    hits = [(text.find(s), i) for i, s in enumerate(stops) if s and s in text]
    if hits:
        start, which = min(hits)
        return start, stops[which]
    held = max((k for s in stops for k in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:k])), default=0)
    return len(text) - held, None
    # <<< solution
