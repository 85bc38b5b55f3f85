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


class StopFilter:
    """Text arrives in pieces; `feed` hands out what cannot belong to a stop string and ends the stream at the
    first one (cut off, as in the OpenAI API). `matched` is the stop string found, if any."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""  # received, not yet handed out: it could be the start of a stop string
        self.matched: str | None = None
        self.finished = False

    def feed(self, text: str, final: bool = False) -> str:
        """Take the next piece of text; `final` says no more will come (hand out everything still held)."""
        # TODO(ch13): scan what is pending plus `text`. On a stop string, hand out the text before it and finish
        # (record the match); otherwise hand out all but the held-back tail, or, when `final`, all of it (and
        # finish). A finished filter refuses more text with a RuntimeError.
        # >>> solution
        if self.finished:
            raise RuntimeError("this stream has finished: it takes no more text")
        self.pending += text
        cut, self.matched = scan_for_stop(self.pending, self.stops)
        if self.matched is None and final:
            cut = len(self.pending)
        self.finished = final or self.matched is not None
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out
        # <<< solution
