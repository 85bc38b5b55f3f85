"""Chapter 13: the tokenizer package. Prompts to ids (chat template, validation) and the incremental detokenizer:
pieces that never split a character, add up to the full decode, and stop exactly at stop strings and stop ids.

Every expected value comes from the tokenizer's own decode of the whole sequence, or from a brute-force scan."""

from __future__ import annotations

import random

import pytest
import torch

from helpers import tokenizer
from minisgl.tokenizer import DetokenizeManager, IncrementalDetokenizer, StopFilter, TokenizeManager, scan_for_stop

STREAM = ("IncrementalDetokenizer._decode_new_text", "StopFilter.feed")
STOP = STREAM + ("scan_for_stop",)
TOKENIZERS = ("smollm2", "tiny-qwen3")
REPLACEMENT = "\ufffd"
TEXTS = [
    "The quick brown fox jumps over the lazy dog. It was 42 degrees!",
    "北京是中国的首都，上海是最大的城市。我们今天去公园散步吧。",
    "Mixed: 你好, world 🙂👍🏽 and café, naïve, 😀😀 — done.",
    "Emoji only: 🚀🌍🔥🎉 and a flag 🇫🇷 then 日本語のテキスト.",
]


def stream(tok, ids, **kw) -> tuple[list[str], IncrementalDetokenizer]:
    """Feed ids one at a time (until the stream ends by itself), then finish: the pieces, one per step + finish."""
    d = IncrementalDetokenizer(tok, **kw)
    pieces = []
    for t in ids:
        if d.finished:
            break
        pieces.append(d.step(t))
    pieces.append(d.finish())
    return pieces, d


def fragment_ids(tok) -> list[int]:
    """Ids whose own decode is not whole characters (byte pieces of Chinese and emoji): the hard cases."""
    ids = {t for text in TEXTS for t in tok.encode(text, add_special_tokens=False)}
    return sorted(t for t in ids if REPLACEMENT in tok.decode([t]))


def assert_safe_prefixes(tok, ids, pieces, skip=True):
    """After every step, the text handed out so far is a prefix of the decode of the ids fed so far AND of the
    final decode: a piece never shows a half character (U+FFFD) that a later token completes."""
    final = tok.decode(ids, skip_special_tokens=skip)
    sent = ""
    for k, piece in enumerate(pieces[:-1], start=1):
        sent += piece
        now = tok.decode(ids[:k], skip_special_tokens=skip)
        assert now.startswith(sent), f"after {k} tokens sent {sent[-12:]!r}, but the ids decode to {now[-12:]!r}"
        assert final.startswith(sent), f"after {k} tokens sent {sent[-12:]!r}, not a prefix of the final text"


@pytest.mark.stubs(*STREAM)
@pytest.mark.parametrize("name", TOKENIZERS)
def test_real_text_streams_in_whole_characters(name):
    tok = tokenizer(name)
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        pieces, _ = stream(tok, ids)
        assert "".join(pieces) == text, f"{name}: pieces add up to {''.join(pieces)!r}, not {text!r}"
        bad = [p for p in pieces if REPLACEMENT in p]
        assert not bad, f"{name}: pieces with a broken character: {bad}"
        assert_safe_prefixes(tok, ids, pieces)
        if name == "tiny-qwen3" and not text.isascii():  # its ~1k vocab splits every CJK character into bytes
            assert pieces.count("") > 2, "a split character should be held back over several steps"


@pytest.mark.stubs(*STREAM)
def test_ascii_text_is_never_held_back():
    tok = tokenizer("smollm2")
    ids = tok.encode(TEXTS[0], add_special_tokens=False)
    pieces, _ = stream(tok, ids)
    got = pieces[:-1]  # the last piece is finish()'s
    want = [tok.decode(ids[:k + 1])[len(tok.decode(ids[:k])):] for k in range(len(ids))]
    assert got == want, f"whole-character text must come out one token at a time: {got} != {want}"


@pytest.mark.stubs(*STREAM)
@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("skip", [True, False])
def test_random_ids_add_up_to_the_full_decode(name, skip):
    tok = tokenizer(name)
    rng = random.Random(13 + skip)
    hard, specials = fragment_ids(tok), tok.all_special_ids
    for trial in range(60):
        pool = [rng.choice(hard) for _ in range(20)] + [rng.randrange(len(tok)) for _ in range(6)] + specials
        ids = [rng.choice(pool) for _ in range(rng.randrange(1, 30))]
        pieces, d = stream(tok, ids, skip_special_tokens=skip)
        full = tok.decode(ids, skip_special_tokens=skip)
        assert "".join(pieces) == full, f"{name} ids {ids}: pieces {pieces} do not add up to {full!r}"
        assert d.finished and d.matched_stop is None
        assert_safe_prefixes(tok, ids, pieces, skip)


@pytest.mark.stubs("DetokenizeManager.detokenize", *STREAM)
@pytest.mark.parametrize("name", TOKENIZERS)
def test_a_step_decoded_ahead_in_one_batch_streams_the_same_pieces(name, monkeypatch):
    """DetokenizeManager.prefetch decodes, for a whole step, the windows each stream's next token needs, in one
    call of the Rust tokenizer: the pieces must be exactly those of one stream at a time, and the streams must not
    call decode themselves for them."""
    tok = tokenizer(name)
    rng = random.Random(5)
    hard, specials = fragment_ids(tok), tok.all_special_ids
    pool = [rng.choice(hard) for _ in range(20)] + [rng.randrange(len(tok)) for _ in range(6)] + specials
    seqs = {uid: [rng.choice(pool) for _ in range(rng.randrange(5, 25))] for uid in range(12)}
    stops = {3: dict(stop=[tok.decode(seqs[3][2:4])]), 5: dict(stop_token_ids=[seqs[5][6]])}
    calls = []
    real_decode = tok.decode
    monkeypatch.setattr(tok, "decode", lambda ids, **kw: calls.append(len(ids)) or real_decode(ids, **kw))
    batched, alone = DetokenizeManager(tok), DetokenizeManager(tok)
    for m in (batched, alone):
        for uid in seqs:
            m.add(uid, skip_special_tokens=uid % 2 == 0, **stops.get(uid, {}))
    got, want = {uid: [] for uid in seqs}, {uid: [] for uid in seqs}
    for k in range(max(map(len, seqs.values()))):
        step = [(uid, ids[k], k == len(ids) - 1) for uid, ids in seqs.items() if k < len(ids)]
        for uid, token, last in step:
            want[uid].append(alone.detokenize(uid, token, last))
        calls.clear()
        batched.prefetch([(uid, token) for uid, token, _ in step])
        assert calls == [], f"prefetch called tokenizer.decode {len(calls)} times instead of one batch decode"
        for uid, token, last in step:
            got[uid].append(batched.detokenize(uid, token, last))
        finishing = sum(last or uid in stops for uid, _, last in step)
        assert len(calls) <= 2 * finishing, f"step {k}: {len(calls)} decodes after the prefetch (streams ending: " \
                                            f"{finishing})"
    assert got == want, "the prefetched steps streamed other pieces than one stream at a time"
    assert not batched.streams and all(not d.prefetched for d in alone.streams.values())


@pytest.mark.stubs(*STREAM)
def test_each_step_decodes_a_short_window():
    """Decoding the whole sequence at every step would be right but quadratic: the window must slide."""
    tok = tokenizer("tiny-qwen3")
    lengths = []

    class Counting:
        def decode(self, ids, **kw):
            lengths.append(len(ids))
            return tok.decode(ids, **kw)

    ids = tok.encode(" ".join(TEXTS * 3), add_special_tokens=False)
    pieces, _ = stream(Counting(), ids)
    assert "".join(pieces) == tok.decode(ids)
    assert max(lengths) <= 16, f"a {len(ids)}-token stream decoded windows of up to {max(lengths)} ids"


def brute_force_scan(text, stops):
    hits = [(text.find(s), i) for i, s in enumerate(stops) if s in text]
    if hits:
        at, i = min(hits)
        return at, stops[i]
    keep = min(h for h in range(len(text) + 1) if any(s.startswith(text[h:]) and text[h:] != s for s in stops))
    return keep, None


@pytest.mark.stubs("scan_for_stop")
def test_scan_for_stop_matches_a_brute_force_scan():
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 9)))
        stops = ["".join(rng.choice("abc") for _ in range(rng.randrange(1, 5))) for _ in range(rng.randrange(1, 4))]
        assert scan_for_stop(text, stops) == brute_force_scan(text, stops), f"text {text!r}, stops {stops}"
    assert scan_for_stop("hello", []) == (5, None), "no stop strings: everything is released"


@pytest.mark.stubs("StopFilter.feed", "scan_for_stop")
def test_stop_filter_releases_exactly_what_cannot_start_a_stop_string():
    """Random text in random pieces: after each piece, what came out is the text received so far up to the first
    stop string, or less its longest tail that could begin one (brute force); never more, never less."""
    rng = random.Random(1)
    for _ in range(1500):
        text = "".join(rng.choice("abc ") for _ in range(rng.randrange(0, 14)))
        stops = ["".join(rng.choice("abc") for _ in range(rng.randrange(1, 5))) for _ in range(rng.randrange(0, 3))]
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randrange(1, 5))))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        f, out = StopFilter(stops), ""
        for k, piece in enumerate(pieces):
            final = k == len(pieces) - 1
            out += f.feed(piece, final=final)
            received = "".join(pieces[:k + 1])
            keep, stop = brute_force_scan(received, stops) if stops else (len(received), None)
            want = received if final and stop is None else received[:keep]
            assert out == want, f"stops {stops}, pieces {pieces[:k + 1]}: out {out!r}, want {want!r}"
            assert (f.finished, f.matched) == (final or stop is not None, stop), f"stops {stops}, text {received!r}"
            if f.finished:
                break
        if f.finished:
            with pytest.raises(RuntimeError):
                f.feed("a")


@pytest.mark.stubs(*STOP)
@pytest.mark.parametrize("name", TOKENIZERS)
def test_stop_strings_cut_at_every_split_position(name):
    """Stop strings of every length from every character position: each cuts the token boundaries differently.
    The text before the first occurrence comes out, nothing of the stop string, and the stream ends on the step
    whose token completes it."""
    tok = tokenizer(name)
    checked = 0
    for text in (TEXTS[0][:34], TEXTS[2][:30]):
        ids = tok.encode(text, add_special_tokens=False)
        for start in range(len(text)):
            for length in (1, 2, 3, 5, 8):
                stop = text[start:start + length]
                if REPLACEMENT in stop or len(stop) < length:
                    continue
                pieces, d = stream(tok, ids, stop=[stop])
                want = text[:text.find(stop)]
                assert "".join(pieces) == want, f"{name}: stop {stop!r} gives {''.join(pieces)!r}, want {want!r}"
                assert d.matched_stop == stop, f"stop {stop!r} reported as {d.matched_stop!r}"
                ends = next(k for k in range(1, len(ids) + 1) if stop in tok.decode(ids[:k]))
                assert len(pieces) == ends + 1, f"stop {stop!r} completes at token {ends}, stream took {len(pieces) - 1}"
                assert_safe_prefixes(tok, ids[:ends], pieces)
                checked += 1
    assert checked > 200


@pytest.mark.stubs(*STOP)
def test_text_that_may_start_a_stop_string_waits_then_comes_out():
    tok = tokenizer("smollm2")
    text = "The fox and the foxglove, then the end"
    ids = tok.encode(text, add_special_tokens=False)
    pieces, d = stream(tok, ids, stop=["foxes", "the end!"])
    assert "".join(pieces) == text and d.matched_stop is None, f"no stop string occurs: {pieces}"
    sent = ""
    for k, piece in enumerate(pieces[:-1], start=1):
        sent += piece
        now = tok.decode(ids[:k])
        held = now[len(sent):]
        assert any(s.startswith(held) for s in ["foxes", "the end!"]), f"after {k} tokens {held!r} held for nothing"
    assert pieces[-1] == "the end", f"the tail that could start 'the end!' is released by finish: {pieces[-1]!r}"


@pytest.mark.stubs(*STOP)
def test_stop_string_at_the_start_at_the_end_and_the_earliest_wins():
    tok = tokenizer("smollm2")
    text = "Hello there, general Kenobi."
    ids = tok.encode(text, add_special_tokens=False)
    pieces, d = stream(tok, ids, stop=["Hel"])
    assert "".join(pieces) == "" and d.matched_stop == "Hel" and len(pieces) == 2, f"stop at the start: {pieces}"
    pieces, d = stream(tok, ids, stop=["bi."])
    assert "".join(pieces) == "Hello there, general Keno" and d.matched_stop == "bi.", f"stop at the end: {pieces}"
    pieces, d = stream(tok, ids, stop=["general", "there", "zzz"])
    assert "".join(pieces) == "Hello " and d.matched_stop == "there", f"the earliest occurrence wins: {pieces}"
    with pytest.raises(RuntimeError):
        d.step(ids[0])


@pytest.mark.stubs(*STREAM)
@pytest.mark.parametrize("skip", [True, False])
def test_stop_token_id_ends_the_stream_and_flushes(skip):
    tok = tokenizer("smollm2")
    eos = tok.eos_token_id
    head = tok.encode("好的 👍", add_special_tokens=False)
    tail = tok.encode(" never shown", add_special_tokens=False)
    ids = head[:-1] + [eos] + tail  # the emoji's last byte never comes: its first bytes are flushed as U+FFFD
    pieces, d = stream(tok, ids, stop_token_ids=[eos], skip_special_tokens=skip)
    want = tok.decode(head[:-1], skip_special_tokens=skip)
    assert want.endswith(REPLACEMENT), "fixture: the emoji must span several tokens"
    assert "".join(pieces) == want, f"text up to the stop id: {''.join(pieces)!r} != {want!r}"
    assert d.matched_stop == eos and len(pieces) == len(head) + 1, f"stopped at {len(pieces) - 1}, by {d.matched_stop}"
    assert REPLACEMENT in pieces[-2] and REPLACEMENT not in "".join(pieces[:-2]), "only the final flush has U+FFFD"


@pytest.mark.stubs("DetokenizeManager.detokenize", *STOP)
def test_manager_keeps_streams_apart_and_ends_them():
    tok = tokenizer("tiny-qwen3")
    texts = {7: TEXTS[1][:12], 9: TEXTS[2]}
    ids = {uid: tok.encode(t, add_special_tokens=False) for uid, t in texts.items()}
    manager = DetokenizeManager(tok)
    manager.add(7)
    manager.add(9, stop=["café"])
    with pytest.raises(ValueError):
        manager.add(9)
    out = {7: [], 9: []}
    ended = {}
    for k in range(max(map(len, ids.values()))):
        for uid in (7, 9):
            if k < len(ids[uid]):
                r = manager.detokenize(uid, ids[uid][k], finished=k == len(ids[uid]) - 1)
                assert r.uid == uid
                out[uid].append(r.text)
                if r.finished and uid not in ended:
                    ended[uid] = (k, r.matched_stop)
    assert "".join(out[7]) == texts[7] and ended[7] == (len(ids[7]) - 1, None), f"request 7: {out[7]}, {ended}"
    cut = texts[9].find("café")
    assert "".join(out[9]) == texts[9][:cut] and ended[9][1] == "café", f"request 9: {''.join(out[9])!r}, {ended}"
    assert not manager.streams, "ended streams are dropped"
    late = manager.detokenize(9, ids[9][0], finished=False)  # overlap scheduling: one token after the end
    assert (late.text, late.finished) == ("", True), f"a token after the end is ignored, got {late}"


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say 你好 🙂"}]


@pytest.mark.stubs("TokenizeManager.tokenize")
@pytest.mark.parametrize("name", TOKENIZERS)
def test_tokenize_text_chat_and_ids(name):
    tok = tokenizer(name)
    manager = TokenizeManager(tok)
    want = list(tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True, return_dict=False))
    assert manager.tokenize(CHAT) == want, "chat messages go through the chat template, generation prompt opened"
    assert manager.tokenize("plain 文字") == tok.encode("plain 文字"), "text is encoded as the tokenizer does"
    assert manager.tokenize((3, 4, 5)) == [3, 4, 5], "token ids pass through"
    assert manager.tokenize(torch.tensor([3, 4], dtype=torch.int32)) == [3, 4], "a tensor of ids too, as ints"


@pytest.mark.stubs("TokenizeManager.tokenize")
def test_tokenize_refuses_bad_prompts_with_a_reason():
    tok = tokenizer("tiny-qwen3")
    manager = TokenizeManager(tok, max_prompt_len=8)
    bad = {"": "empty", (): "empty", "one two three four five six seven eight nine ten": "more than",
           (1, len(tok)): "not an integer in", (1, -1): "not an integer in", (True,): "not an integer in",
           (1.0,): "not an integer in", b"\x01": "got bytes"}
    for prompt, reason in bad.items():
        with pytest.raises(ValueError, match=reason):
            manager.tokenize(prompt)
    for message in ({"role": "robot", "content": "hi"}, {"role": "user"}, {"role": "user", "content": 3}):
        with pytest.raises(ValueError, match="role"):
            manager.tokenize([message])
    assert manager.tokenize([len(tok) - 1]) == [len(tok) - 1], "the last id of the vocabulary is fine"
