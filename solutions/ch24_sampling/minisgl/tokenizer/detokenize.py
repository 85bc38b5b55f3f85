"""Incremental detokenizing: token ids arrive one at a time, text leaves in pieces that are always whole
characters, that add up to the decode of the whole sequence, and that stop exactly at a stop string."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .stop import StopFilter

REPLACEMENT = "\ufffd"  # what decoding gives for bytes that are not (yet) a whole UTF-8 character


class IncrementalDetokenizer:
    """One request's stream. `step(token_id)` returns the new text that is safe to show (often ""); `finish()`
    ends the stream and returns what was held back. The stream also ends by itself on a stop token id (not part
    of the text) or a stop string (cut off, as in the OpenAI API); `matched_stop` then says which one. With
    min_tokens (chapter 24, vLLM's rule) neither ends the stream before its min_tokens-th token: until then a stop
    token is text like any other and the text goes out without looking for stop strings."""

    def __init__(self, tokenizer, stop: Sequence[str] = (), stop_token_ids: Iterable[int] = (),
                 skip_special_tokens: bool = True, min_tokens: int = 0) -> None:
        self.tokenizer = tokenizer
        self.min_tokens = min_tokens
        self.stop_filter = StopFilter(stop)
        self.stop_token_ids = set(stop_token_ids)
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        # ids[prefix_offset:read_offset] were already turned into text; they are decoded again only as context
        # for the ids after read_offset, whose text is new.
        self.prefix_offset = 0
        self.read_offset = 0
        self.finished = False
        self.matched_stop: str | int | None = None
        self.prefetched: dict[tuple[int, ...], str] = {}  # ids -> text, decoded ahead for a whole step (prefetch)

    def step(self, token_id: int) -> str:
        if self.finished:
            raise RuntimeError("this stream has finished: it takes no more tokens")
        try:
            if token_id in self.stop_token_ids and len(self.ids) >= self.min_tokens:
                self.matched_stop = token_id
                return self.finish()
            self.ids.append(token_id)
            return self._emit(self._decode_new_text(final=False), final=False)
        finally:
            self.prefetched.clear()  # what was decoded ahead was for this step only

    def finish(self) -> str:
        """The stream ends here (a stop token, max_tokens, an abort): decode everything still held back."""
        if self.finished:
            return ""
        return self._emit(self._decode_new_text(final=True), final=True)

    def _emit(self, new_text: str, final: bool) -> str:
        if len(self.ids) <= self.min_tokens and not final:  # too early to stop: nothing held back for a stop
            piece, self.stop_filter.pending = self.stop_filter.pending + new_text, ""
            return piece
        piece = self.stop_filter.feed(new_text, final)
        self.finished = self.stop_filter.finished
        if self.stop_filter.matched is not None:
            self.matched_stop = self.stop_filter.matched
        return piece

    def _decode(self, ids: list[int]) -> str:
        text = self.prefetched.pop(tuple(ids), None)
        if text is not None:
            return text
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def next_windows(self, token_id: int) -> tuple[list[int], list[int]]:
        """The two id lists the next step(token_id) decodes, the context and the window (see _decode_new_text):
        what DetokenizeManager.prefetch decodes ahead."""
        return self.ids[self.prefix_offset:self.read_offset], self.ids[self.prefix_offset:] + [token_id]

    def _decode_new_text(self, final: bool) -> str:
        """The text the ids after read_offset add, or "" while it may still end in part of a character."""
        context = self._decode(self.ids[self.prefix_offset:self.read_offset])
        window = self._decode(self.ids[self.prefix_offset:])
        new_text = window[len(context):]
        if not final and (not new_text or new_text.endswith(REPLACEMENT)):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return new_text


@dataclass
class DetokenizeResult:
    uid: int
    text: str  # the new piece of the request's text (may be "")
    finished: bool  # the stream ended: stop string, stop token, or the sender's last token
    matched_stop: str | int | None = None


class DetokenizeManager:
    """The detokenizers of all running requests, by uid: `add` one when its request starts, then feed each
    generated token with `detokenize`. A stream is dropped when it ends; a token that arrives after that (with
    overlap scheduling one more token can be on its way) is ignored."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.streams: dict[int, IncrementalDetokenizer] = {}

    def add(self, uid: int, stop: Sequence[str] = (), stop_token_ids: Iterable[int] = (),
            skip_special_tokens: bool = True, min_tokens: int = 0) -> None:
        if uid in self.streams:
            raise ValueError(f"request {uid} already has a stream")
        self.streams[uid] = IncrementalDetokenizer(self.tokenizer, stop, stop_token_ids, skip_special_tokens,
                                                   min_tokens)

    def prefetch(self, tokens: Iterable[tuple[int, int]]) -> None:
        """Decode ahead, in one call of the tokenizer, the windows that the next detokenize of each (uid, token)
        will decode: a step of 256 requests costs one batch decode instead of 512 calls of `decode`. Each stream
        keeps the texts by their ids and uses them once; a text that is not asked for (a stream that ends on a stop
        token, a uid twice in one step) is simply decoded again when its turn comes."""
        asks = []
        for uid, token in tokens:
            stream = self.streams.get(uid)
            if stream is not None and not stream.finished and token not in stream.stop_token_ids:
                asks += [(stream, ids) for ids in stream.next_windows(token)]
        by_setting: dict[bool, list] = {}
        for stream, ids in asks:
            by_setting.setdefault(stream.skip_special_tokens, []).append((stream, ids))
        for skip, group in by_setting.items():
            texts = decode_batch(self.tokenizer, [ids for _, ids in group], skip)
            for (stream, ids), text in zip(group, texts):
                stream.prefetched[tuple(ids)] = text

    def detokenize(self, uid: int, next_token: int, finished: bool) -> DetokenizeResult:
        """Feed one token of request `uid`; `finished` says it is the request's last one (max_tokens, EOS)."""
        stream = self.streams.get(uid)
        if stream is None:
            return DetokenizeResult(uid, "", True)
        text = stream.step(next_token)
        if finished and not stream.finished:
            text += stream.finish()
        if stream.finished:
            del self.streams[uid]
        return DetokenizeResult(uid, text, stream.finished, stream.matched_stop)


def decode_batch(tokenizer, seqs: list[list[int]], skip_special_tokens: bool) -> list[str]:
    """tokenizer.decode of each id list, in one call to the Rust tokenizer where that is exactly what decode does
    (a Hugging Face fast tokenizer that does not clean up spaces afterwards); else one decode per list."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if seqs and backend is not None and _plain_fast_decode(type(tokenizer)) \
            and not getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return backend.decode_batch(seqs, skip_special_tokens=skip_special_tokens)
    return [tokenizer.decode(ids, skip_special_tokens=skip_special_tokens) for ids in seqs]


@functools.cache
def _plain_fast_decode(cls: type) -> bool:
    """Whether the class decodes with transformers' own fast-tokenizer _decode (the Rust decode, then an optional
    clean-up), not with one of its own."""
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend as Fast
    except ImportError:  # transformers 4
        from transformers import PreTrainedTokenizerFast as Fast
    return getattr(cls, "_decode", None) is Fast._decode
