"""Chapter 25: structured output. The token bitmask against xgrammar's own kernel, the scheduler's masks and
matchers, and whole runs: every output of a batch of schemas parses and validates (jsonschema), greedy output under
a grammar equals Hugging Face generate with xgrammar's own logits processor, constrained and free rows in one
batch, overlap on and off, aborts mid-grammar, and a grammar that does not compile refused before anything runs."""

from __future__ import annotations

import json
import re

import pytest
import torch

from helpers import (CHAT, TEXTS, assert_clean, assert_close, hf_cached, hf_greedy, hf_model, model_path, token_rows,
                     tokenizer)
from minisgl.constrained.grammar import GrammarCache, GrammarSpec, allocate_bitmask, apply_token_bitmask
from minisgl.core import Batch, SamplingParams
from minisgl.llm import LLM

NAME = "smollm2"  # a real tokenizer: JSON needs tokens for quotes, braces and digits
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
     "required": ["colors"]},
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
     "required": ["answer", "sure"]},
]


@pytest.fixture(scope="module")
def llm():
    return LLM(model_path(NAME), max_running_reqs=8, max_seq_len=512, num_pages=4096, overlap=False)


def chat_ids(question: str) -> list[int]:
    tok = tokenizer(NAME)
    messages = [{"role": "user", "content": question}]
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def json_params(schema: dict, max_tokens: int = 48) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, json_schema=json.dumps(schema))


# --- the bitmask --------------------------------------------------------------------------------------------------

@pytest.mark.stubs("apply_token_bitmask")
@pytest.mark.parametrize("vocab", [64, 100, 49152])
def test_the_bitmask_masks_what_xgrammars_kernel_masks_and_no_other_row(vocab):
    """Random bitmasks (every bit pattern, bit 31 of a word included) on some rows of a batch: the same logits as
    xgrammar's apply_token_bitmask_inplace on those rows, every other row bit for bit."""
    import xgrammar as xgr

    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(5, vocab, generator=g)
    rows = torch.tensor([3, 0])
    words = (vocab + 31) // 32
    bitmask = torch.randint(-2**31, 2**31 - 1, (2, words), generator=g, dtype=torch.int64).to(torch.int32)
    bitmask[0, 0] = -1  # all allowed
    bitmask[1, -1] = -2**31  # only bit 31 of the last word
    got = apply_token_bitmask(logits.clone(), bitmask, rows)
    want = logits.clone()
    for k, row in enumerate(rows.tolist()):
        line = want[row: row + 1]
        xgr.apply_token_bitmask_inplace(line, bitmask[k: k + 1])
    for row in range(5):
        assert torch.equal(got[row], want[row]), \
            f"vocab {vocab}, row {row}: {int((got[row] != want[row]).sum())} logits differ from xgrammar's mask"


@pytest.mark.stubs("apply_token_bitmask")
def test_the_bitmask_returns_new_logits_and_leaves_its_input_as_it_was():
    """The contract: a new tensor, nothing written into the logits given (the engine reads chapter 24's
    log-probabilities from them after sampling)."""
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 100, generator=g)
    before = logits.clone()
    bitmask = torch.zeros(1, 4, dtype=torch.int32)
    bitmask[0, 0] = 0b100  # token 2 alone
    got = apply_token_bitmask(logits, bitmask, torch.tensor([1]))
    changed = int((logits != before).sum())
    assert changed == 0, \
        f"apply_token_bitmask edited the logits it was given in place ({changed} entries changed): it must return " \
        "a new tensor, because the engine reads the log-probabilities from those logits"
    allowed = torch.isfinite(got[1]).nonzero().flatten().tolist()
    assert allowed == [2], f"word 0b100 allows token 2 alone, got {allowed}"
    assert torch.equal(got[[0, 2]], before[[0, 2]]), "rows without a mask come back bit for bit"


# --- the scheduler's masks and matchers ------------------------------------------------------------------------------

@pytest.mark.stubs("GrammarManager.mask", "Scheduler.finish_reason")
def test_a_batch_mask_has_a_line_per_constrained_sampling_row(llm):
    """Three requests, the middle one free, prefilled together: the first batch's mask covers rows 0 and 2, in
    batch order, each line what a fresh matcher of its grammar allows; batches of free requests carry no mask."""
    sched = llm.scheduler
    specs = [GrammarSpec("regex", "(yes|no)"), None, GrammarSpec("json_schema", json.dumps(SCHEMAS[0]))]
    params = [SamplingParams(max_tokens=4, **({spec.kind: spec.text} if spec else {})) for spec in specs]
    seen = []
    sched.on_batch = lambda b: seen.append(([r.uid for r in b.reqs], b.grammar_mask))
    try:
        llm.generate([chat_ids(CHAT[0])] * 3, params)
        first_uids, mask = seen[0]
        assert len(first_uids) == 3 and mask is not None, f"the first batch: {first_uids}, mask {mask}"
        rows, bitmask = mask
        assert rows == [0, 2], f"rows with a grammar, in batch order: {rows}"
        for k, spec in enumerate((specs[0], specs[2])):
            want = allocate_bitmask(1, llm.engine.model_config.vocab_size)
            sched.grammar.cache.matcher(spec).fill(want, 0)
            assert torch.equal(bitmask[k], want[0]), f"line {k} is not what the {spec.kind} allows first"
        seen.clear()
        llm.generate([chat_ids(CHAT[1])] * 2, SamplingParams(max_tokens=3))
        assert seen and all(m is None for _, m in seen), "batches without a grammar carry no mask"
    finally:
        sched.on_batch = None
    assert not sched.grammar.matchers, f"finished requests keep no matcher: {list(sched.grammar.matchers)}"
    assert_clean(llm)


@pytest.mark.stubs("GrammarManager.advance")
def test_a_token_outside_the_grammar_is_an_error_naming_it(llm):
    from minisgl.core import Req
    from minisgl.scheduler.utils import PendingReq

    sched = llm.scheduler
    ids = torch.tensor(chat_ids(CHAT[1]), dtype=torch.int32)
    params = SamplingParams(max_tokens=4, regex="(yes|no)")
    sched.add_request(PendingReq(950, ids, params))  # waiting: its matcher exists
    req = Req(ids, 0, 0, 4, 950, params)
    try:
        bad = tokenizer(NAME).encode("maybe")[0]
        with pytest.raises(RuntimeError, match=f"request 950: token {bad} is outside its grammar"):
            sched.grammar.advance(req, bad)
        sched.grammar.advance(req, tokenizer(NAME).encode("yes")[0])  # allowed: no error
    finally:
        assert sched.abort_request(950), "the request was waiting"
    assert 950 not in sched.grammar.matchers, "an aborted request keeps no matcher"
    assert_clean(llm)


@pytest.mark.stubs("Scheduler.finish_reason")
def test_the_finish_rule_ends_a_request_once_its_matcher_accepted_the_stop_token(llm):
    """finish_reason on requests whose matcher is walked by hand under the regex (yes|no): not finished while the
    grammar is part-way or complete but its stop token not yet accepted; finished once the matcher has accepted EOS,
    with ignore_eos too (then only the grammar can end it). A request without a grammar keeps chapter 24's rule."""
    from minisgl.core import Req
    from minisgl.scheduler.utils import PendingReq

    sched = llm.scheduler
    tok = tokenizer(NAME)
    eos = llm.engine.model_config.eos_token_ids[0]
    ids = torch.tensor(chat_ids(CHAT[1]), dtype=torch.int32)
    yes = tok.encode("yes")
    try:
        for uid, ignore_eos in ((970, False), (971, True)):
            params = SamplingParams(max_tokens=8, regex="(yes|no)", ignore_eos=ignore_eos)
            sched.add_request(PendingReq(uid, ids, params))  # waiting: its matcher exists
            req, matcher = Req(ids, 0, 0, 8, uid, params), sched.grammar.matchers[uid]
            for token in yes:
                assert matcher.accept(token), f"the fixture: (yes|no) accepts the tokens of 'yes' ({yes})"
                assert sched.finish_reason(req, token) is None, \
                    f"request {uid}: after token {token} the grammar has not accepted its stop token: not finished"
            assert matcher.accept(eos) and matcher.finished, "the fixture: after 'yes' the grammar takes EOS and ends"
            assert sched.finish_reason(req, eos) == "stop", (
                f"request {uid} (ignore_eos={ignore_eos}): its matcher accepted the grammar's stop token, so the "
                "request has finished with \"stop\"" +
                (": with ignore_eos the EOS ends nothing, the complete grammar must" if ignore_eos else ""))
    finally:
        for uid in (970, 971):
            sched.abort_request(uid)
    free = SamplingParams(max_tokens=8)
    assert sched.finish_reason(Req(ids, 0, 0, 8, 972, free), eos) == "stop", "a free request still ends at EOS"
    assert sched.finish_reason(Req(ids, 0, 0, 8, 973, SamplingParams(max_tokens=8, ignore_eos=True)), eos) is None, \
        "a free request with ignore_eos does not end at EOS"
    assert not sched.grammar.matchers, "aborted requests keep no matcher"
    assert_clean(llm)


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance", "Scheduler.finish_reason")
def test_a_request_its_grammar_ended_finishes_with_stop_even_with_ignore_eos():
    """A constrained request with ignore_eos ends when its grammar is complete, long before max_tokens: the scheduler
    says "stop" (as SGLang and OpenAI do), not "length", in LLM.generate's answer and in the last message its I/O loop
    sends (in process). A free request with ignore_eos runs to max_tokens: "length"."""
    from minisgl.message import UserMsg
    from minisgl.scheduler.io import SchedulerIO

    class Inbox:
        def __init__(self, items):
            self.items = items

        def get(self, timeout=None):
            return self.items.pop(0) if self.items else None

    class Outbox:
        def __init__(self):
            self.sent = []

        def put(self, msg):
            self.sent.extend(getattr(msg, "data", [msg]))

    ids = chat_ids(CHAT[1])
    grammar = SamplingParams(max_tokens=16, regex="(yes|no)", ignore_eos=True)
    free = SamplingParams(max_tokens=3, ignore_eos=True)
    fresh = LLM(model_path(NAME), max_running_reqs=4, max_seq_len=256, num_pages=1024, overlap=False)
    outs = fresh.generate([ids, ids], [grammar, free])
    assert len(outs[0]["token_ids"]) < 16, f"the fixture: the grammar ends the request early, {outs[0]}"
    got = [(o["finish_reason"], len(o["token_ids"])) for o in outs]
    assert got[0][0] == "stop" and got[1] == ("length", 3), \
        f"LLM.generate: (finish_reason, tokens) {got}, expected ('stop', <16) for the grammar, ('length', 3) free"

    prompt = torch.tensor(ids, dtype=torch.int32)
    outbox = Outbox()
    io = SchedulerIO(fresh.scheduler, Inbox([UserMsg(980, prompt, grammar), UserMsg(981, prompt, free)]), outbox)
    io.run_forever(alive=lambda: False)
    tokens = token_rows(outbox.sent)
    for uid, out, reason in ((980, outs[0], "stop"), (981, outs[1], "length")):
        mine = [m for m in tokens if m.uid == uid]
        assert [m.next_token for m in mine] == out["token_ids"], f"request {uid}: the I/O loop sent other tokens"
        last = mine[-1]
        assert last.finished and last.finish_reason == reason, \
            f"request {uid}: the last message says finished={last.finished}, finish_reason={last.finish_reason!r}; " \
            f"expected {reason!r}"
    assert_clean(fresh)


# --- whole runs -------------------------------------------------------------------------------------------------

def hf_constrained(ids: list[int], spec: GrammarSpec, n: int, name: str = NAME) -> list[int]:
    """HF greedy with xgrammar's own Hugging Face logits processor (its matcher, its kernel), cached on disk."""
    from importlib.metadata import version

    return hf_cached(name, ["xgrammar", version("xgrammar"), spec.kind, spec.text, list(ids), n],
                     lambda: _hf_constrained(list(ids), spec, n, name))


def _hf_constrained(ids: list[int], spec: GrammarSpec, n: int, name: str) -> list[int]:
    from xgrammar.contrib.hf import LogitsProcessor

    model = hf_model(name)
    cache = GrammarCache(tokenizer(name), model.config.vocab_size)
    processor = LogitsProcessor(cache.compile(spec))
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, logits_processor=[processor],
                             temperature=None, top_p=None, top_k=None)
    return out[0, len(ids):].tolist()


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_a_batch_of_schemas_and_free_rows(overlap):
    """Three schemas and two free rows in one batch: each constrained answer parses, validates against its schema
    and equals HF generate with xgrammar's processor; the free rows equal HF greedy."""
    import jsonschema

    llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=512, num_pages=4096, overlap=overlap)
    questions = ["Describe a person as JSON.", "Give me some colors as JSON.", "Is the sky blue? Answer in JSON."]
    ids = [chat_ids(q) for q in questions] + [chat_ids(CHAT[0]), chat_ids(CHAT[1])]
    params = [json_params(s, 64) for s in SCHEMAS] + [SamplingParams(max_tokens=16)] * 2
    outs = llm.generate(ids, params)
    tok = tokenizer(NAME)
    for i, schema in enumerate(SCHEMAS):
        text = outs[i]["text"]
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise AssertionError(f"request {i}: not JSON ({e}): {text!r}") from None
        jsonschema.validate(value, schema)
        want = hf_constrained(ids[i], GrammarSpec("json_schema", json.dumps(schema)), 64)
        assert outs[i]["token_ids"] == want, \
            f"request {i}: {tok.decode(outs[i]['token_ids'])!r} vs HF with xgrammar {tok.decode(want)!r}"
    for i in (3, 4):
        want = hf_greedy(NAME, ids[i], 16, stop_at_eos=True)
        assert outs[i]["token_ids"] == want, f"free request {i} differs from HF greedy"
    assert not llm.scheduler.grammar.matchers, "finished requests keep no matcher"
    assert_clean(llm)


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
def test_a_chunked_constrained_prompt_beside_constrained_decode_rows():
    """Chunked prefill (16 tokens a step) with mixed batches (chapter 21): a long constrained prompt is prefilled
    in chunks while two constrained requests decode in the same batches. A chunk samples nothing and gets no mask
    line; every answer equals HF generate with xgrammar's processor."""
    llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=512, num_pages=4096, overlap=False,
              max_extend_tokens=16, enable_mixed_chunk=True)
    long_question = "Describe a person as JSON. " + " ".join(TEXTS)
    ids = [chat_ids("Is the sky blue? Answer in JSON."), chat_ids("Give me some colors as JSON."),
           chat_ids(long_question)]
    schemas = [SCHEMAS[2], SCHEMAS[1], SCHEMAS[0]]
    mixed = []
    llm.scheduler.on_batch = lambda b: mixed.append(
        b.phase == "mixed" and any(not r.samples for r in b.reqs) and sum(r.uid in llm.scheduler.grammar.matchers
                                                                          for r in b.reqs if r.samples) > 0)
    outs = llm.generate(ids, [json_params(s, 40) for s in schemas])
    assert any(mixed), "no batch mixed a prompt chunk with constrained decode rows: the test lost its point"
    tok = tokenizer(NAME)
    for i, schema in enumerate(schemas):
        want = hf_constrained(ids[i], GrammarSpec("json_schema", json.dumps(schema)), 40)
        assert outs[i]["token_ids"] == want, \
            f"request {i}: {tok.decode(outs[i]['token_ids'])!r} vs HF with xgrammar {tok.decode(want)!r}"
    assert not llm.scheduler.grammar.matchers
    assert_clean(llm)


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
def test_a_regex_and_an_ebnf_grammar_end_the_request_when_complete(llm):
    """The request ends as soon as its grammar is complete, long before max_tokens; the text matches."""
    regex = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d)"
    ebnf = 'root ::= "The answer is " ("yes" | "no") "."'
    outs = llm.generate([chat_ids("When was the moon landing?"), chat_ids("Is water wet?")],
                        [SamplingParams(max_tokens=64, regex=regex), SamplingParams(max_tokens=64, ebnf=ebnf)])
    assert re.fullmatch(regex, outs[0]["text"]), f"the regex's answer: {outs[0]['text']!r}"
    assert re.fullmatch(r"The answer is (yes|no)\.", outs[1]["text"]), f"the EBNF's answer: {outs[1]['text']!r}"
    for out in outs:
        assert len(out["token_ids"]) < 64, f"a complete grammar ends the request: {len(out['token_ids'])} tokens"
    assert_clean(llm)


@pytest.mark.stubs("Scheduler.finish_reason", "apply_token_bitmask", "GrammarManager.mask",
                   "GrammarManager.advance")
def test_a_complete_grammar_ends_the_request_even_with_ignore_eos(llm):
    """With ignore_eos an EOS does not end a request, and EOS is what a complete grammar's matcher accepts last, so
    only the finish rule's second half can end these: once the matcher has accepted the grammar's stop token it
    accepts nothing more. Each answer equals HF generate with xgrammar's processor (which stops at that EOS) and
    ends long before its 64 tokens; a free request with ignore_eos beside them runs to its max_tokens."""
    specs = [GrammarSpec("regex", r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d)"),
             GrammarSpec("ebnf", 'root ::= "The answer is " ("yes" | "no") "."'),
             GrammarSpec("json_schema", json.dumps(SCHEMAS[2]))]
    ids = [chat_ids(q) for q in ("When was the moon landing?", "Is water wet?", "Is the sky blue? Answer in JSON.")]
    params = [SamplingParams(max_tokens=64, ignore_eos=True, **{spec.kind: spec.text}) for spec in specs]
    free = SamplingParams(max_tokens=12, ignore_eos=True)
    try:
        outs = llm.generate(ids + [chat_ids(CHAT[0])], params + [free])
    except RuntimeError as e:
        if "terminated" not in str(e):
            raise
        raise AssertionError("a request ran on after its grammar was complete (with ignore_eos no EOS ends it), and "
                             "xgrammar refused to fill the mask of its terminated matcher: a complete grammar must end "
                             f"the request. xgrammar said: {str(e).strip()}") from None
    tok = tokenizer(NAME)
    for i, spec in enumerate(specs):
        got, want = outs[i]["token_ids"], hf_constrained(ids[i], spec, 64)
        assert len(want) < 64, f"the fixture: the {spec.kind}'s answer completes before 64 tokens: {tok.decode(want)!r}"
        assert got == want, (f"request {i} ({spec.kind}, ignore_eos): {len(got)} tokens {tok.decode(got)!r}, HF with "
                             f"xgrammar {len(want)} tokens {tok.decode(want)!r}: a complete grammar ends the request")
    assert len(outs[3]["token_ids"]) == 12, "a free request with ignore_eos runs to its max_tokens"
    assert not llm.scheduler.grammar.matchers, "finished requests keep no matcher"
    assert_clean(llm)


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
def test_a_constrained_request_gets_the_models_logprobs_not_the_masked_ones(llm):
    """logprobs (chapter 24) are the model's log_softmax, before any edit: under a grammar too. A mask written into
    the logits in place would give the log-probabilities of the masked distribution instead (only the allowed
    tokens, renormalised), which the first tokens of this grammar make far larger than the model's."""
    spec = GrammarSpec("ebnf", 'root ::= "The answer is " ("yes" | "no") "."')
    ids = chat_ids("Is water wet?")
    out = llm.generate([ids], SamplingParams(max_tokens=16, ebnf=spec.text, logprobs=True, top_logprobs=2))[0]
    tokens = out["token_ids"]
    assert tokens == hf_constrained(ids, spec, 16), f"the answer differs from HF with xgrammar: {out['text']!r}"
    with torch.inference_mode():
        logits = hf_model(NAME)(torch.tensor([ids + tokens])).logits[0, len(ids) - 1: len(ids) + len(tokens) - 1]
    want = logits.double().log_softmax(-1)[torch.arange(len(tokens)), torch.tensor(tokens)]
    got = torch.tensor(out["logprobs"], dtype=torch.float64)
    assert len(got) == len(tokens), f"{len(got)} logprobs for {len(tokens)} tokens"
    masked = int((got > want + 1e-3).sum())
    assert_close(got, want, 1e-4, "logprobs of a constrained request against HF's raw log_softmax"
                 + (f" ({masked} of {len(tokens)} are larger than the model's: the mask was applied to the logits "
                    "they are read from; apply_token_bitmask must return a new tensor)" if masked else ""), row="token")
    assert_clean(llm)


@pytest.mark.parametrize("field, value, match", [
    ("json_schema", "{not json", "json_schema does not compile"),
    ("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": "no-such-type"}}}),
     "json_schema does not compile"),
    ("regex", "(unclosed", "regex does not compile"),
    ("ebnf", "root ::= missing_rule", "ebnf does not compile"),
])
def test_a_grammar_that_does_not_compile_is_refused_before_anything_runs(llm, field, value, match):
    before = llm.scheduler.engine.num_pages
    with pytest.raises(ValueError, match=match):
        llm.generate([chat_ids(CHAT[0]), chat_ids(CHAT[1])],
                     [SamplingParams(max_tokens=4), SamplingParams(max_tokens=4, **{field: value})])
    assert llm.scheduler.idle and not llm.scheduler.grammar.matchers and llm.scheduler.engine.num_pages == before
    assert_clean(llm)


@pytest.mark.parametrize("kwargs, match", [
    (dict(json_schema=""), "json_schema must be a non-empty string"),
    (dict(regex=5), "regex must be a non-empty string"),
    (dict(regex="a", ebnf='root ::= "a"'), "at most one of json_schema, regex and ebnf"),
])
def test_bad_grammar_settings_are_a_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


@pytest.mark.stubs("GrammarManager.mask", "GrammarManager.advance", "Scheduler.finish_reason")
def test_an_abort_mid_grammar_frees_the_request_and_its_matcher(llm):
    from minisgl.scheduler.utils import PendingReq

    sched = llm.scheduler
    ids = torch.tensor(chat_ids("Describe a person as JSON."), dtype=torch.int32)
    sched.add_request(PendingReq(960, ids, json_params(SCHEMAS[0], 64)))
    sched.add_request(PendingReq(961, ids, SamplingParams(max_tokens=8)))
    for _ in range(4):  # the prefill, then three decode steps: the grammar is part-way
        sched.step()
    assert 960 in sched.grammar.matchers and not sched.grammar.matchers[960].finished
    assert sched.abort_request(960), "the constrained request was running"
    assert 960 not in sched.grammar.matchers, "an aborted request keeps no matcher"
    sched.run_until_idle()
    assert 961 in sched.finished and 960 not in sched.finished
    sched.finished.clear()
    assert_clean(llm)


# --- the server ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    from openai import OpenAI

    from minisgl.server.local import LocalServer

    flags = ("--max-running-reqs", "8", "--max-seq-len", "512", "--cpu-kv-cache-mb", "32")
    with LocalServer(model_path(NAME), *flags, echo=False) as server:
        yield OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
def test_the_openai_client_gets_json_that_follows_its_schema(client):
    import jsonschema

    apply_token_bitmask(torch.zeros(1, 32), torch.full((1, 1), -1, dtype=torch.int32), torch.zeros(1, dtype=torch.long))
    schema = SCHEMAS[0]  # the line above: on the skeleton, the stub fails here, in this process
    r = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Describe a person as JSON."}], max_tokens=64,
        temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    value = json.loads(r.choices[0].message.content)
    jsonschema.validate(value, schema)
    assert r.choices[0].finish_reason == "stop", "a complete grammar ends the answer"
    r = client.completions.create(model=NAME, prompt="The year the first person walked on the moon:", max_tokens=8,
                                  temperature=0, extra_body={"regex": r" \d{4}"})
    assert re.fullmatch(r" \d{4}", r.choices[0].text), f"the regex's answer: {r.choices[0].text!r}"


def test_a_schema_that_does_not_compile_is_a_400_naming_response_format(client):
    import openai

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "object", "properties": {"a": {"type": 5}}}}})
    assert refused.value.body["param"] == "response_format", f"{refused.value.body}"
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=NAME, prompt="hi", max_tokens=4, extra_body={"regex": "(unclosed"})
    assert refused.value.body["param"] == "regex", f"{refused.value.body}"
    r = client.completions.create(model=NAME, prompt="hi", max_tokens=2, temperature=0)
    assert r.choices[0].text, "the server answers after the bad requests"


@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
def test_constrained_requests_come_back_from_a_retraction_with_their_grammar():
    """Optimistic admission on a pool too small for six JSON answers at once: requests are retracted and
    recomputed, each keeps its matcher (by uid, with the tokens it accepted), and the answers equal those of a pool
    that never retracts."""
    from minisgl.scheduler.retract import NewTokenRatio

    ids = [chat_ids(q) for q in ("Describe a person as JSON.", "Give me some colors as JSON.",
                                 "Is the sky blue? Answer in JSON.")] * 2
    params = [json_params(SCHEMAS[i % 3], 48) for i in range(6)]
    runs = {}
    for pool, admission in ((4096, "conservative"), (150, "optimistic")):
        llm = LLM(model_path(NAME), max_running_reqs=8, max_seq_len=128, num_pages=pool, overlap=False,
                  admission=admission, new_token_ratio=NewTokenRatio(0.1, 0.1, 1))
        runs[admission] = ([o["token_ids"] for o in llm.generate(ids, params)], llm.scheduler.admission.num_retractions)
        assert not llm.scheduler.grammar.matchers
        assert_clean(llm)
    (calm, zero), (tight, retractions) = runs["conservative"], runs["optimistic"]
    assert zero == 0 and retractions > 0, f"retractions: {zero} in the large pool, {retractions} in the tight one"
    for i, (a, b) in enumerate(zip(calm, tight)):
        assert a == b, f"request {i} changed with retraction"


# --- the GPU ------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.stubs("apply_token_bitmask", "GrammarManager.mask", "GrammarManager.advance",
                   "Scheduler.finish_reason")
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_grammars_on_the_gpu_with_cuda_graphs(overlap):
    """On CUDA in float32, with CUDA graphs up to batch 8 and overlap on or off: a JSON schema row, a regex row and
    two free rows of tiny-qwen3 in one batch; the constrained rows equal HF generate with xgrammar's processor on
    the CPU (the mask made on the host, applied on the GPU), the free rows HF greedy."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    name, n = "tiny-qwen3", 24  # small enough to travel to a GPU machine; its byte-level BPE spells any JSON
    tok = tokenizer(name)
    llm = LLM(model_path(name), device="cuda", dtype="float32", max_running_reqs=8, max_seq_len=256,
              num_pages=1024, overlap=overlap, cuda_graph_max_bs=8)
    ids = [tok.encode(t) for t in TEXTS[:4]]
    specs = [GrammarSpec("json_schema", json.dumps(SCHEMAS[0])), GrammarSpec("regex", "[a-z ]{3,40}")]
    params = [SamplingParams(max_tokens=n, json_schema=specs[0].text),
              SamplingParams(max_tokens=n, regex=specs[1].text),
              SamplingParams(max_tokens=n, ignore_eos=True), SamplingParams(max_tokens=n, ignore_eos=True)]
    outs = llm.generate(ids, params)
    for i, spec in enumerate(specs):
        want = hf_constrained(ids[i], spec, n, name)
        assert outs[i]["token_ids"] == want, \
            f"GPU request {i} ({spec.kind}): {tok.decode(outs[i]['token_ids'])!r} vs HF {tok.decode(want)!r}"
    for i in (2, 3):
        assert outs[i]["token_ids"] == hf_greedy(name, ids[i], n), f"free GPU request {i} differs from HF greedy"
    assert not llm.scheduler.grammar.matchers, "finished requests keep no matcher"
    assert_clean(llm)
