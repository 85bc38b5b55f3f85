"""Chapter 26: speculative decoding. n-gram lookup and greedy acceptance against brute-force searches; speculative
sampling's output distribution against p (chi-square, small vocabularies); the pages of rejected drafts given back
exactly; whole runs on tiny-qwen3 whose greedy answers are Hugging Face's token for token with either proposer,
k = 1..4, overlap on and off, pages of 1 and 4 slots, chunked prefill, mixed batches, a radix hit, optimistic
admission, rows that cannot speculate beside rows that do, aborts and stop tokens inside accepted runs; sampled
answers whose joint distribution is the model's; the server's flags; the decode kernel's verify rows (several queries
a request, causal) against float64, through Triton's interpreter on a CPU."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import random
from collections.abc import Iterator

import pytest
import torch

if not torch.cuda.is_available():  # before triton is imported: on a CPU the Triton kernels run in its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from helpers import (TEXTS, assert_clean, assert_close, attention_reference, hf_cached, hf_greedy, hf_logits,
                     hf_model, model_path, needs_triton, scattered_kv_cache, token_rows, tokenizer)
from minisgl.core import Batch, Req, SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.prefill import ChunkedReq
from minisgl.scheduler.utils import PendingReq
from minisgl.spec import Proposer, SpecConfig, accept_greedy, accept_rejection, ngram_lookup

NAME = "tiny-qwen3"
DRAFT = "tiny-qwen3-draft"
N = 24  # tokens per answer in the greedy runs
RUN_STUBS = ("Speculation.draft_lengths", "Engine.complete_verify", "CacheManager.free_rejected",
             "Scheduler.record_run",
             "accept_greedy")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    tok = tokenizer(NAME)
    return [tok.encode(t) for t in TEXTS]


@pytest.fixture(scope="module")
def reference(prompts) -> list[list[int]]:
    return [hf_greedy(NAME, p, N) for p in prompts]


def spec(method: str, k: int, draft: str = DRAFT, backoff: bool = False) -> SpecConfig:
    """Without the backoff unless asked: these short answers would spend most steps backing off, and the tests that
    check what verification does need it to run."""
    if method == "ngram":
        return SpecConfig("ngram", k, backoff=backoff)
    return SpecConfig("draft", k, draft_model_path=model_path(draft), backoff=backoff)


def make_llm(speculative: SpecConfig | None, page_size: int = 1, overlap: bool = False, **kw) -> LLM:
    config = dict(max_running_reqs=8, max_seq_len=256, num_pages=2048 // page_size) | kw
    return LLM(model_path(NAME), page_size=page_size, overlap=overlap, speculative=speculative, **config)


def greedy(max_tokens: int = N, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kw)


def assert_same(got: list[list[int]], want: list[list[int]], what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            at = next((j for j, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            raise AssertionError(f"request {i}, {what}: first difference at output position {at}: got "
                                 f"{g[at:at + 4]}, expected {w[at:at + 4]} ({len(g)} tokens, expected {len(w)})")


# --- n-gram lookup and greedy acceptance against brute force ------------------------------------------------------

def ngram_oracle(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """Every start of every n-gram tried, longest n first; the latest start whose n-gram is the suffix and ends
    before the last token wins."""
    for n in range(max_n, min_n - 1, -1):
        starts = [s for s in range(len(tokens) - n) if tokens[s:s + n] == tokens[len(tokens) - n:]]
        if starts and n < len(tokens):
            return tokens[max(starts) + n:max(starts) + n + k]
    return []



def one_in_three(uid: int, pos: int) -> bool:
    """Whether a scripted draft at (request, position) is right: a fixed third of them, the same in every run."""
    return random.Random(uid * 1000 + pos).random() < 1 / 3

@pytest.mark.stubs("ngram_lookup")
def test_ngram_lookup_finds_the_latest_earlier_occurrence_of_the_longest_suffix():
    cases = [([5, 6, 7], 2, 1, 3, []),  # the suffix only matches itself
             ([1, 2, 3, 1, 2], 4, 1, 3, [3, 1, 2]),  # what follows may run into the suffix
             ([1, 5, 1, 6, 1], 3, 1, 1, [6, 1]),  # the latest occurrence, not the first
             ([9, 1, 2, 8, 2, 7, 1, 2], 1, 1, 2, [8]),  # the longer suffix first, though "2" occurs later
             ([4, 4, 4, 4], 2, 1, 3, [4]),  # overlapping occurrences: the latest earlier one ends at position 2
             ([3, 1, 2, 3], 5, 2, 3, []),  # only n = 1 would match, and min_n is 2
             ([7], 3, 1, 3, [])]
    for tokens, k, lo, hi, want in cases:
        got = ngram_lookup(tokens, k, lo, hi)
        assert got == want, f"ngram_lookup({tokens}, k={k}, min_n={lo}, max_n={hi}) = {got}, expected {want}"
    rng = random.Random(0)
    for case in range(3000):
        tokens = [rng.randrange(rng.choice((2, 3, 5))) for _ in range(rng.randint(1, 30))]
        k, lo = rng.randint(1, 5), rng.randint(1, 3)
        hi = rng.randint(lo, 4)
        got, want = ngram_lookup(tokens, k, lo, hi), ngram_oracle(tokens, k, lo, hi)
        assert got == want, f"case {case}: ngram_lookup({tokens}, k={k}, min_n={lo}, max_n={hi}) = {got}, expected {want}"


@pytest.mark.stubs("accept_greedy")
def test_accept_greedy_counts_the_matching_prefix_of_each_rows_own_drafts():
    g = torch.Generator().manual_seed(0)
    for trial in range(300):
        rows, k = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 7, (1,), generator=g))
        target = torch.randint(0, 3, (rows, k + 1), generator=g)
        drafts = torch.randint(0, 3, (rows, k), generator=g)  # padding past a row's length too: it may match
        agree = torch.randint(0, k + 1, (rows,), generator=g)
        for b in range(rows):  # long agreements are likely, short ones too
            drafts[b, : agree[b]] = target[b, : agree[b]]
        lens = torch.randint(0, k + 1, (rows,), generator=g)
        got = accept_greedy(drafts, target, lens)
        assert got.dtype == torch.int64 and got.shape == (rows,), f"accepted counts {got.dtype} {tuple(got.shape)}"
        for b in range(rows):
            want = 0
            while want < lens[b] and drafts[b, want] == target[b, want]:
                want += 1
            assert int(got[b]) == want, (f"trial {trial}, row {b}: drafts {drafts[b].tolist()} (its {int(lens[b])} "
                                         f"are real), target {target[b].tolist()}: accepted {int(got[b])}, expected {want}")


class HostRead(AssertionError):
    """A tensor's value was read by the host where the device should decide alone."""


READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def host_reads(forbid: bool) -> Iterator[list[str]]:
    """Record every read of a tensor's value by the host (.item(), .tolist(), int(t), if t: ...) inside the block;
    with `forbid`, the first one raises HostRead. On a GPU each such read waits for the device: acceptance that
    reads per row or per token stalls the step once per read instead of once."""
    seen: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def spy(name):
        def read(self, *args, **kwargs):
            seen.append(name)
            if forbid:
                raise HostRead(f"Tensor.{name} read a tensor of shape {tuple(self.shape)} back to the host")
            return saved[name](self, *args, **kwargs)
        return read

    for name in READS:
        setattr(torch.Tensor, name, spy(name))
    try:
        yield seen
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def acceptance_inputs(seed: int = 3, rows: int = 6, k: int = 4, vocab: int = 7):
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 3, (rows, k + 1), generator=g)
    drafts = torch.where(torch.rand(rows, k, generator=g) < 0.7, target[:, :k], torch.randint(0, 3, (rows, k), generator=g))
    lens = torch.randint(0, k + 1, (rows,), generator=g)
    p = torch.rand(rows, k + 1, vocab, generator=g).softmax(-1)
    q = torch.rand(rows, k, vocab, generator=g).softmax(-1)
    return drafts, target, lens, p, q


def per_row_accept_greedy(drafts, target_tokens, draft_lens):
    """A learner's correct but host-bound accept_greedy: a loop over rows that reads every comparison back."""
    counts = []
    for b in range(drafts.shape[0]):
        n = 0
        while n < draft_lens[b].item() and drafts[b, n].item() == target_tokens[b, n].item():
            n += 1
        counts.append(n)
    return torch.tensor(counts)


@pytest.mark.stubs("accept_greedy", "accept_rejection")
def test_acceptance_decides_on_the_device_without_reading_a_value_back():
    drafts, target, lens, p, q = acceptance_inputs()
    with host_reads(forbid=True):
        counts = accept_greedy(drafts, target, lens)
        n, nxt = accept_rejection(drafts, lens, p, q, torch.Generator().manual_seed(0))
    assert counts.shape == n.shape == nxt.shape == (drafts.shape[0],), "one count and one token per row"
    # The check catches the realistic slow version: right counts, one host read per comparison.
    assert per_row_accept_greedy(drafts, target, lens).tolist() == counts.tolist(), "the planted loop is correct"
    with pytest.raises(HostRead), host_reads(forbid=True):
        per_row_accept_greedy(drafts, target, lens)


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("sampled", [False, True])
def test_a_verify_step_reads_the_device_once(prompts, reference, sampled, monkeypatch):
    """Everything a verify step decides (acceptance, greedy and sampled rows, rows without drafts, the new tokens in
    the token pool) is computed on the device and read back in one go, when the scheduler processes the step: the
    launch reads nothing (the host goes on while the device verifies), and the forward pass and the ordinary sampler
    aside, processing the step reads once, the decisions, before the requests move on."""
    from minisgl.scheduler import speculate
    from minisgl.scheduler.scheduler import Scheduler
    from minisgl.spec.verify import verify_batch

    llm = make_llm(spec("ngram", 3))
    sched, engine = llm.scheduler, llm.engine
    truth = {uid: p + r for uid, (p, r) in enumerate(zip(prompts, reference))}
    sched.speculation.proposer = ScriptedProposer(truth, one_in_three)
    forward, record, process, reads = engine.forward_verify, sched._process_last_data, sched._process, []

    def unwatched(fn):  # the model and the sampler, the decode step's own reads; recording (log-probabilities)
        def call(*args, **kwargs):
            saved = {name: getattr(torch.Tensor, name) for name in READS}
            for name, method in ORIGINAL_READS.items():
                setattr(torch.Tensor, name, method)
            try:
                return fn(*args, **kwargs)
            finally:
                for name, method in saved.items():
                    setattr(torch.Tensor, name, method)
        return call

    def launched(*args):  # the pass and the decisions, queued: no read
        with host_reads(forbid=True):
            return verify_batch(*args)

    def processed(data):  # the decisions read back, the requests moved on
        if data is None or not data.batch.is_verify:
            return process(data)
        with host_reads(forbid=False) as seen:
            out = process(data)
        reads.append(list(seen))
        return out

    engine.forward_verify = unwatched(forward)
    monkeypatch.setattr(sched, "_process_last_data", unwatched(record))
    monkeypatch.setattr(sched.cache_manager, "free_rejected", unwatched(sched.cache_manager.free_rejected))  # host pages
    monkeypatch.setattr(sched, "_process", processed)
    monkeypatch.setattr(speculate, "verify_batch", launched)
    params = [greedy(), SamplingParams(max_tokens=N, ignore_eos=True, temperature=0.8, top_k=5) if sampled else greedy(),
              greedy(logprobs=True)]  # the last row never speculates: it keeps the sampler's token
    for uid, (p, sp) in enumerate(zip(prompts, params)):
        sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), sp))
    sched.run_until_idle(sched.check_integrity)
    assert reads, "no verify step ran"
    for step, seen in enumerate(reads):
        assert len(seen) == 1, f"verify step {step} read the device {len(seen)} times ({seen}), expected once"
    assert_same([sched.finished.pop(0).output_ids], reference[:1], "greedy row beside the others")
    assert_clean(llm)


ORIGINAL_READS = {name: getattr(torch.Tensor, name) for name in READS}


# --- speculative sampling: the output is distributed as p -----------------------------------------------------------

def chi_square_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X chi-square distributed with an integer `dof`, in closed form (Abramowitz & Stegun
    26.4.4-5): exp(-x/2) sum_{i<dof/2} (x/2)^i / i! for even dof; for odd dof erfc(sqrt(x/2)) plus
    exp(-x/2) sum_{i=1}^{(dof-1)/2} (x/2)^(i-1/2) / Gamma(i+1/2). Equal to scipy.stats.chi2.sf to 3e-14 (relative)
    for dof 1-11 and stat 0-100, without scipy."""
    half = stat / 2
    if dof % 2 == 0:
        return math.exp(-half) * sum(half ** i / math.factorial(i) for i in range(dof // 2))
    return math.erfc(math.sqrt(half)) + math.exp(-half) * sum(
        half ** (i - 0.5) / math.gamma(i + 0.5) for i in range(1, dof // 2 + 1))


def test_chi_square_tail_matches_its_table_values():
    """The tail function against the chi-square table's 0.001 critical values (dof 1-5) and two exact cases."""
    for dof, critical in ((1, 10.828), (2, 13.816), (3, 16.266), (4, 18.467), (5, 20.515)):
        assert abs(chi_square_sf(critical, dof) - 1e-3) < 1e-6, f"dof {dof}: P(X >= {critical}) is not 0.001"
    assert chi_square_sf(0.0, 3) == 1.0 and abs(chi_square_sf(2.0, 2) - math.exp(-1)) < 1e-15


def chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor, what: str) -> float:
    """p-value of Pearson's chi-square statistic of the observed counts under probs (float64); a token with
    probability 0 must never occur (it is left out of the statistic, as its expected count is 0)."""
    never = (probs == 0) & (counts > 0)
    assert not never.any(), f"{what}: tokens {never.nonzero().flatten().tolist()} have probability 0 yet occurred"
    keep = probs > 0
    observed, expected = counts[keep].double(), probs[keep] * counts.sum()
    stat = float(((observed - expected) ** 2 / expected).sum())
    return chi_square_sf(stat, int(keep.sum()) - 1)


def emitted_positions(drafts: torch.Tensor, n: torch.Tensor, nxt: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Position i's token of every row that emitted one (the row's drafts up to n, then its next token)."""
    out = []
    for i in range(k + 1):
        rows = n >= i
        tokens = torch.where(n[rows] > i, drafts[rows, min(i, k - 1)], nxt[rows])
        out.append(tokens)
    return out


@pytest.mark.stubs("accept_rejection")
@pytest.mark.parametrize("kind", ["point-mass", "general-q"])
def test_speculative_sampling_emits_tokens_distributed_as_p(kind):
    """60,000 rows of one verify step, k = 2 with some rows proposing only 1 draft: the first token of every row,
    the second of every row that accepted draft 1, the third of every row that accepted both, each follow p at its
    position (chi-square against float64 p). q is a point mass (an n-gram draft, always the same token) or a
    general distribution the drafts are drawn from."""
    vocab, k, rows = 6, 2, 60000
    g = torch.Generator().manual_seed(2)
    p = (torch.randn(k + 1, vocab, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
    p[:, 5] = 0  # a token the target never emits
    p /= p.sum(-1, keepdim=True)
    if kind == "point-mass":
        fixed = torch.tensor([2, 0])  # the same guesses in every row, as n-gram lookup makes them
        drafts = fixed.repeat(rows, 1)
        q = torch.nn.functional.one_hot(fixed, vocab).double()
    else:
        q = (torch.randn(k, vocab, generator=g, dtype=torch.float64)).softmax(-1)
        drafts = torch.stack([torch.multinomial(q[i].float(), rows, replacement=True, generator=g) for i in range(k)], 1)
    lens = torch.where(torch.arange(rows) % 3 == 0, 1, k)
    n, nxt = accept_rejection(drafts, lens, p.float().expand(rows, -1, -1), q.float().expand(rows, -1, -1),
                              torch.Generator().manual_seed(3))
    assert n.shape == (rows,) and nxt.shape == (rows,), f"shapes {tuple(n.shape)} and {tuple(nxt.shape)}"
    assert bool((n >= 0).all() and (n <= lens).all()), "an accepted count beyond its row's drafts"
    for i, tokens in enumerate(emitted_positions(drafts, n, nxt, k)):
        counts = torch.bincount(tokens, minlength=vocab)
        pvalue = chi_square_pvalue(counts, p[i], f"{kind}, position {i}")
        assert pvalue > 1e-3, (f"{kind}: the tokens emitted at position {i} ({int(counts.sum())} rows) are not "
                               f"distributed as p: frequencies {(counts / counts.sum()).tolist()}, p {p[i].tolist()} "
                               f"(chi-square p-value {pvalue:.1e})")


@pytest.mark.stubs("accept_rejection")
def test_speculative_sampling_accepts_everything_when_q_is_p_and_never_emits_what_p_forbids():
    vocab, k, rows = 8, 3, 4000
    g = torch.Generator().manual_seed(4)
    p = torch.randn(rows, k + 1, vocab, generator=g).softmax(-1)
    drafts = torch.multinomial(p[:, :k].reshape(-1, vocab), 1, generator=g).view(rows, k)
    lens = torch.randint(1, k + 1, (rows,), generator=g)
    n, _ = accept_rejection(drafts, lens, p, p[:, :k].clone(), torch.Generator().manual_seed(5))
    assert torch.equal(n, lens), f"q = p: {int((n != lens).sum())} rows rejected a draft (counts {n[:8].tolist()}, " \
                                 f"drafts {lens[:8].tolist()})"
    forbidden = torch.zeros(vocab, dtype=torch.bool)
    forbidden[[1, 4]] = True
    p = p.masked_fill(forbidden, 0)
    p /= p.sum(-1, keepdim=True)
    q = torch.randn(rows, k, vocab, generator=g).softmax(-1)  # q likes the forbidden tokens as much as any
    drafts = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).view(rows, k)
    n, nxt = accept_rejection(drafts, lens, p, q, torch.Generator().manual_seed(6))
    for i, tokens in enumerate(emitted_positions(drafts, n, nxt, k)):
        bad = forbidden[tokens]
        assert not bad.any(), f"position {i}: {int(bad.sum())} rows emitted a token of probability 0 under p"


# --- the pages of rejected drafts ------------------------------------------------------------------------------------

@pytest.mark.stubs("CacheManager.free_rejected")
@pytest.mark.parametrize("page_size", [1, 4])
def test_free_rejected_keeps_the_whole_pages_of_the_kept_positions(page_size):
    """A request holds pages for [0, cached) when its verify step allocates up to cached + 1 + k; it keeps n drafts:
    afterwards it holds exactly the pages of [0, cached + n + 1) and every other page is free."""
    from minisgl.scheduler.cache import CacheManager, div_ceil

    num_pages = 64 // page_size
    for cached in range(0, 10):
        for k in range(1, 5):
            for n in range(k + 1):
                table = torch.zeros(2, 64, dtype=torch.int32)
                cache = CacheManager(num_pages, page_size, table, "naive")
                req = Req(torch.arange(1, cached + 2, dtype=torch.int32), 0, 0, 20, 0, SamplingParams(max_tokens=20))
                req.device_len = cached
                if cached:
                    cache.allocate_paged([req])
                req.cached_len, req.device_len = cached, cached + 1 + k  # the verify step: last token + k drafts
                cache.allocate_paged([req])
                req.cached_len = cached + n + 1  # what complete_verify leaves
                req.device_len = req.cached_len + 1
                cache.free_rejected(req, cached + 1 + k)
                where = f"page_size {page_size}, cached {cached}, {k} drafts, {n} kept"
                held = cache.held_pages([req])
                assert len(held) == div_ceil(cached + n + 1, page_size), \
                    f"{where}: the request holds {len(held)} pages, expected {div_ceil(cached + n + 1, page_size)}"
                assert len(cache._free_pages) == num_pages - len(held), \
                    f"{where}: {len(cache._free_pages)} pages free, expected {num_pages - len(held)}"
                cache.check_integrity([req])


# --- which rows speculate, and how far ------------------------------------------------------------------------------

@pytest.mark.stubs("Speculation.draft_lengths")
def test_draft_lengths_cap_at_what_is_left_and_skip_rows_that_cannot_speculate():
    llm = make_llm(spec("ngram", 3))
    sched = llm.scheduler
    cases = [(dict(), 50, 3), (dict(), 4, 3), (dict(), 3, 2), (dict(), 2, 1), (dict(), 1, 0),
             (dict(temperature=0.8, top_k=5, top_p=0.9), 50, 3), (dict(seed=7), 50, 3),
             (dict(logprobs=True), 50, 0), (dict(repetition_penalty=1.2), 50, 0), (dict(logit_bias={3: 1.0}), 50, 0),
             (dict(min_tokens=2), 50, 0), (dict(temperature=0.8, min_p=0.1), 50, 0),
             (dict(temperature=0.8, seed=7), 50, 0), (dict(frequency_penalty=0.5), 50, 0)]
    reqs = [Req(torch.arange(1, 6, dtype=torch.int32), i, 4, left, 100 + i, SamplingParams(max_tokens=left, **kw))
            for i, (kw, left, _) in enumerate(cases)]
    got = sched.speculation.draft_lengths(reqs, set())
    for (kw, left, want), k in zip(cases, got):
        assert k == want, f"a request with {kw or 'no settings'} and {left} tokens left may take {want} drafts, got {k}"
    # a grammar (chapter 25): its next mask needs each token first
    assert sched.speculation.draft_lengths(reqs[:1], {100}) == [0], "a request with a grammar speculates not"


# --- after the verify pass: the requests' state, the host's tokens, the draft's KV ------------------------------------

@pytest.mark.stubs("Engine.complete_verify")
def test_complete_verify_moves_each_request_on_by_its_kept_drafts_and_writes_its_new_token():
    """Three rows of a verify batch: 2 drafts of which 0 kept, 3 of which all kept, none (a row that decoded). Each
    request's KV now covers its last token and its kept drafts; its new token sits in the token pool right after."""
    from minisgl.core import Batch

    llm = make_llm(None)
    engine = llm.engine
    reqs = []
    for row, (cached, drafts, left) in enumerate([(6, 2, 10), (9, 3, 4), (4, 0, 1)]):
        req = Req(torch.arange(1, cached + 2, dtype=torch.int32), row, cached, left, row, greedy(left))
        req.device_len += drafts  # the verify pass computed the last token and the drafts
        reqs.append(req)
    engine.token_pool[:3] = -1
    batch = Batch(reqs, "verify")
    engine.complete_verify(batch, [0, 3, 0], torch.tensor([501, 502, 503]))
    for req, (cached, kept, token, decodes) in zip(reqs, [(7, 0, 501, True), (13, 3, 502, False), (5, 0, 503, False)]):
        assert (req.cached_len, req.device_len) == (cached, cached + 1), \
            f"row {req.table_idx} ({kept} drafts kept): cached_len {req.cached_len}, device_len {req.device_len}; " \
            f"expected {cached} and {cached + 1}"
        written = engine.token_pool[req.table_idx].tolist()
        if decodes:
            assert written[cached] == token and written.count(-1) == len(written) - 1, \
                f"row {req.table_idx}: the new token {token} belongs at position {cached} only"
        else:
            assert written.count(-1) == len(written), \
                f"row {req.table_idx} may not decode again (max_tokens reached): nothing to write, got a write"


@pytest.mark.stubs("Scheduler.record_run")
def test_a_run_of_tokens_is_recorded_in_order_up_to_the_token_that_finishes_the_request():
    llm = make_llm(spec("ngram", 4))
    sched = llm.scheduler
    seen = []
    sched.on_token = lambda req, token: seen.append((req.uid, token))
    eos = llm.engine.model_config.eos_token_ids[0]
    for uid, (params, run, finished, kept) in enumerate([
            (SamplingParams(max_tokens=20), [7, 8, 9], None, [7, 8, 9]),  # nothing ends it
            (SamplingParams(max_tokens=20), [7, eos, 9, 10], "stop", [7, eos]),  # a stop token inside the run
            (SamplingParams(max_tokens=20, ignore_eos=True), [7, eos, 9], None, [7, eos, 9]),  # an ordinary token
            (SamplingParams(max_tokens=2), [7, 8, 9], "length", [7, 8])]):  # max_tokens inside the run
        req = Req(torch.tensor([1, 2, 3], dtype=torch.int32), 0, 2, params.max_tokens, uid, params)
        seen.clear()
        got = sched.record_run(req, run, {})
        assert got == finished, f"request {uid}, run {run}: finish reason {got!r}, expected {finished!r}"
        assert req.output_ids == kept and seen == [(uid, t) for t in kept], \
            f"request {uid}, run {run}: recorded {req.output_ids}, on_token saw {seen}; expected {kept}"



def test_input_ids_made_on_read_match_every_token_appended_and_earlier_views_stay_valid():
    """Req.input_ids is made when it is read (append_host writes the buffer only); host_len counts without it."""
    params = SamplingParams(max_tokens=6)
    req = Req(torch.tensor([5, 6], dtype=torch.int32), 0, 1, params.max_tokens, 0, params)
    appended, views = [], []
    for token in (11, 12, 13):
        req.append_host(token)
        appended.append(token)
        assert req.host_len == 2 + len(appended), f"host_len {req.host_len} after appending {appended}"
        views.append(req.input_ids)
        assert req.input_ids.tolist() == [5, 6, *appended] and req.input_ids.dtype == torch.int32, \
            f"input_ids {req.input_ids} after appending {appended}"
    assert [v.tolist() for v in views] == [[5, 6, 11], [5, 6, 11, 12], [5, 6, 11, 12, 13]], \
        f"a view read earlier changed: {views}"
    req.input_ids = torch.tensor([1, 2, 3, 4], dtype=torch.int32)  # replaced (a retraction builds a new one)
    req.append_host(9)
    assert req.input_ids.tolist() == [1, 2, 3, 4, 9] and req.host_len == 5, \
        f"after replacing input_ids and appending 9: {req.input_ids}, host_len {req.host_len}"
    assert views[-1].tolist() == [5, 6, 11, 12, 13], f"the old buffer was written over: {views[-1]}"

def test_the_draft_keeps_the_kv_of_the_accepted_drafts_it_fed_and_no_more():
    llm = make_llm(spec("draft", 3))
    proposer = llm.scheduler.speculation.proposer
    req = Req(torch.arange(1, 11, dtype=torch.int32), 2, 9, 20, 7, greedy(20))
    for n, want in [(0, 10), (1, 11), (2, 12), (3, 12)]:  # 10 tokens known, 3 drafts of which 2 were fed
        proposer._proposed[7] = (2, 10, 12)
        proposer.accepted(req, n)
        assert proposer.kept[7] == (2, want), f"{n} of 3 drafts accepted: kept {proposer.kept[7]}, expected (2, {want})"
        assert 7 not in proposer._proposed, "the proposal is used up"
    proposer.release(req)
    assert 7 not in proposer.kept


# --- whole runs: greedy answers are HF's, token for token -----------------------------------------------------------

@pytest.fixture(scope="module")
def plain_answers(prompts):
    """The same batch without speculation, pages of 1 and of 4 slots."""
    return {ps: [o["token_ids"] for o in make_llm(None, ps).generate(prompts, greedy())] for ps in (1, 4)}


@pytest.mark.stubs("ngram_lookup", *RUN_STUBS)
@pytest.mark.parametrize("method, k, overlap, page_size", [
    ("ngram", 1, False, 1), ("ngram", 2, True, 4), ("ngram", 3, False, 4), ("ngram", 4, True, 1),
    ("draft", 1, True, 4), ("draft", 2, False, 1), ("draft", 3, True, 1), ("draft", 4, False, 4)])
def test_greedy_answers_equal_hf_and_the_answers_without_speculation(prompts, reference, plain_answers, method, k,
                                                                     overlap, page_size):
    llm = make_llm(spec(method, k), page_size, overlap)
    got = [o["token_ids"] for o in llm.generate(prompts, greedy())]
    assert_same(got, reference, f"{method}, k={k}, against HF greedy")
    assert_same(got, plain_answers[page_size], f"{method}, k={k}, against the engine without speculation")
    stats = llm.scheduler.speculation.stats
    assert stats.verify_steps > 0 and stats.proposed > 0, f"nothing was speculated: {stats}"
    assert "verify" in {phase for phase, _ in llm.scheduler.history}
    assert_clean(llm)


class ScriptedProposer(Proposer):
    """Proposes each request's true continuation, spoiled at the positions `spoiled(uid, position)` picks: every
    acceptance count from 0 to k happens, where a real proposer on a random model rarely gets one right."""

    def __init__(self, truth: dict[int, list[int]], spoiled) -> None:
        self.truth, self.spoiled = truth, spoiled
        self.draft_probs = []
        self.counts: list[int] = []

    def propose(self, reqs, ks):
        self.draft_probs = [None] * len(reqs)
        out = []
        for req, k in zip(reqs, ks):
            start = len(req.input_ids)
            seq = self.truth[req.uid]
            out.append([(t + 1) % 1000 + 3 if self.spoiled(req.uid, start + j) else t
                        for j, t in enumerate(seq[start:start + k])])
        return out

    def accepted(self, req, n):
        self.counts.append(n)


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("page_size, overlap", [(1, False), (4, True)])
def test_scripted_drafts_of_every_acceptance_count_keep_pages_exact_step_by_step(prompts, reference, page_size,
                                                                                  overlap):
    """Drafts right two times in three: runs of 0..4 accepted drafts, the bonus token after each; the pages are
    accounted for after every step (a request holds the pages of exactly its cached positions)."""
    k = 4
    llm = make_llm(spec("ngram", k), page_size, overlap)
    sched = llm.scheduler
    truth = {uid: p + r for uid, (p, r) in enumerate(zip(prompts, reference))}
    sched.speculation.proposer = scripted = ScriptedProposer(truth, one_in_three)
    for uid, p in enumerate(prompts):
        sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy()))
    sched.run_until_idle(sched.check_integrity)
    got = [sched.finished.pop(uid).output_ids for uid in range(len(prompts))]
    assert_same(got, reference, "scripted drafts")
    seen = collections.Counter(scripted.counts)
    assert set(seen) == set(range(k + 1)), f"acceptance counts seen {dict(seen)}: the fixture should give all of 0..{k}"
    stats = sched.speculation.stats
    assert stats.accepted == sum(scripted.counts), "the stats count what the proposer heard"
    kept = [sum(n > j for n in scripted.counts) for j in range(k)]  # a draft at j is kept when more than j were
    assert stats.accepted_at == kept, f"drafts kept per draft position: stats {stats.accepted_at}, proposer {kept}"
    assert stats.proposed_at == sorted(stats.proposed_at, reverse=True), (
        f"drafts checked per draft position {stats.proposed_at}: a row with a draft at j has one at every j' < j")
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("miss", ["none found", "all rejected"])
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_steps_that_gain_nothing_back_off_and_decode_with_overlap(prompts, reference, overlap, miss):
    """Right drafts only from the 12th output token on; before it the proposer finds none (text that repeats
    nothing) or only wrong ones. A step that gains nothing backs off (after m misses in a row, the next 2^m - 1 steps
    do not look), so the proposer is asked after 1, 3, 7 and 15 tokens; the steps between decode, with overlap
    launched while the step before is in flight; from 15 on the steps verify and keep drafts. The answer is HF's,
    the pages exact after every step."""
    llm = make_llm(spec("ngram", 3, backoff=True), page_size=4, overlap=overlap)
    sched = llm.scheduler
    prompt = prompts[0]
    scripted = ScriptedProposer({0: prompt + reference[0]}, lambda uid, pos: False)
    asked = []

    def propose(reqs, ks):
        made = len(reqs[0].input_ids) - len(prompt)  # output tokens so far
        asked.append(made)
        wrong = [[(t + 1) % 1000 + 3 for t in d] if miss == "all rejected" else [] for d in scripted.propose(reqs, ks)]
        return scripted.propose(reqs, ks) if made >= 12 else wrong

    sched.speculation.proposer.propose = propose
    launches, launch = [], sched._launch
    sched._launch = lambda batch: launches.append((batch.phase, len(sched._unprocessed))) or launch(batch)
    sched.add_request(PendingReq(0, torch.tensor(prompt, dtype=torch.int32), greedy()))
    sched.run_until_idle(sched.check_integrity)
    assert_same([sched.finished.pop(0).output_ids], reference[:1], f"backoff, overlap {overlap}")
    assert asked[:4] == [1, 3, 7, 15], f"the proposer was asked after {asked} output tokens, expected 1, 3, 7, 15, .."
    stats = sched.speculation.stats
    assert stats.accepted >= 6, f"from 15 tokens on the steps should verify and keep drafts: {stats}"
    # Of the 11 steps that did not look, those after a decode step launch while it is in flight; after a verify step
    # the next launch waits for its accepted counts (with misses by rejection: the first of each of 3 backoffs).
    overlapped = sum(phase == "decode" and in_flight > 0 for phase, in_flight in launches)
    want = (11 if miss == "none found" else 8) if overlap else 0
    assert overlapped == want, f"{overlapped} decode steps were launched with a step in flight, expected {want} " \
                               f"(launches: {launches})"
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("page_size", [1, 4])
def test_verify_graphs_pad_rows_and_batches_and_leave_the_answers_unchanged(prompts, reference, page_size):
    """Graphs for verify steps (replayed eagerly on the CPU, on the same static buffers as on a GPU): rows of 0..k
    drafts padded to k + 1 tokens, three requests padded to a captured size of 4. The answers are HF's, the pages
    exact after every step; a row with no room left in its page-table row for k + 1 positions is not replayed."""
    k = 4
    llm = make_llm(spec("ngram", k), page_size, cuda_graph_max_bs=4)
    graphs = llm.engine.verify_graphs
    assert graphs is not None and graphs.sizes == [1, 2, 4], "verify graphs captured for the decode graphs' sizes"
    sched = llm.scheduler
    truth = {uid: p + r for uid, (p, r) in enumerate(zip(prompts, reference))}
    sched.speculation.proposer = ScriptedProposer(truth, one_in_three)
    replayed = []
    replay = graphs.replay
    graphs.replay = lambda batch: replayed.append(batch.size) or replay(batch)
    for uid, p in enumerate(prompts[:3]):
        sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy()))
    sched.run_until_idle(sched.check_integrity)
    got = [sched.finished.pop(uid).output_ids for uid in range(3)]
    assert_same(got, reference[:3], f"verify graphs, pages of {page_size}")
    verify = sum(phase == "verify" for phase, _ in sched.history)
    assert 3 in replayed, f"a batch of 3 rows should replay the graph of 4: replayed sizes {replayed}"
    assert len(replayed) == verify, f"{len(replayed)} verify graph replays for {verify} verify steps"
    assert_clean(llm)
    row_width = llm.engine.page_table.shape[1]
    edge = [Req(torch.zeros(cached + 1, dtype=torch.int32), 0, cached, 1, 0, greedy())
            for cached in (row_width - k - 1, row_width - k)]
    assert graphs.can_use(Batch(edge[:1], "verify")), "k + 1 positions that end at the row's end fit"
    assert not graphs.can_use(Batch(edge[1:], "verify")), "k + 1 positions past the row's end must run eagerly"


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_a_stop_token_or_max_tokens_inside_an_accepted_run_ends_the_request_there(prompts, reference, overlap):
    """The target as its own draft: every draft is accepted, so runs go on past a stop token and up to max_tokens.
    Each answer ends at its first stop token (or max_tokens), each token reaches on_token exactly once."""
    llm = make_llm(spec("draft", 3, draft=NAME), page_size=4, overlap=overlap)
    stop = reference[0][9]
    assert stop not in reference[0][:9], "the fixture's stop token must first occur at output position 9"
    llm.engine.model_config = dataclasses.replace(llm.engine.model_config, eos_token_ids=(stop,))
    seen = collections.defaultdict(list)
    llm.scheduler.on_token = lambda req, token: seen[req.uid].append(token)
    max_tokens = [N, 2, 5, 11]
    outs = [o["token_ids"] for o in llm.generate(prompts, [SamplingParams(max_tokens=m) for m in max_tokens])]
    want = []
    for ref, m in zip(reference, max_tokens):
        cut = ref[:m]
        want.append(cut[: cut.index(stop) + 1] if stop in cut else cut)
    assert_same(outs, want, "a stop token (or max_tokens) inside an accepted run")
    assert [seen[uid] for uid in range(len(prompts))] == want, "on_token must see each kept token once, in order"
    stats = llm.scheduler.speculation.stats
    assert stats.proposed > 0 and stats.accepted == stats.proposed, f"a draft equal to the target: {stats}"
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
def test_the_draft_model_proposes_its_own_greedy_continuation_at_every_step(prompts):
    """What the draft proposes equals Hugging Face greedy on the draft model from the request's tokens: the draft
    keeps only the KV of tokens the target accepted and computes the rest, whatever was accepted before."""
    llm = make_llm(spec("draft", 3), page_size=1)
    proposals = []
    propose = llm.scheduler.speculation.proposer.propose

    def recording(reqs, ks):
        drafts = propose(reqs, ks)
        proposals.extend((r.input_ids.tolist(), d) for r, d in zip(reqs, drafts) if d)
        return drafts

    llm.scheduler.speculation.proposer.propose = recording
    llm.generate(prompts[:2], greedy(16))
    assert llm.scheduler.speculation.stats.accepted > 0, "the fixture needs some accepted drafts"
    for step, (tokens, drafts) in enumerate(proposals[::3]):
        want = hf_greedy(DRAFT, tokens, len(drafts))
        assert drafts == want, (f"proposal {3 * step} after {len(tokens)} tokens: the draft proposed {drafts}, its "
                                f"greedy continuation is {want}")
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
def test_rows_that_cannot_speculate_decode_in_the_verify_pass_as_without_speculation(prompts, reference):
    """A greedy row speculates; rows with log-probabilities, a repetition penalty, logit_bias, a seeded sample and
    a seeded min_p sample decode one token each in the same verify passes, sampled as without speculation."""
    params = [greedy(), greedy(logprobs=True, top_logprobs=2), greedy(repetition_penalty=1.3),
              greedy(logit_bias={reference[3][0]: -5.0}), greedy(temperature=0.9, seed=5),
              greedy(temperature=1.1, min_p=0.05, seed=6)]
    batch = [prompts[i % len(prompts)] for i in range(len(params))]
    runs = {}
    for name, s in (("plain", None), ("spec", spec("draft", 3, draft=NAME))):
        llm = make_llm(s)
        rows_in_verify = set()
        llm.scheduler.on_batch = lambda b: rows_in_verify.update(r.uid for r in b.reqs) if b.is_verify else None
        runs[name] = llm.generate(batch, params)
        assert_clean(llm)
    assert rows_in_verify == set(range(len(params))), f"rows in verify passes: {sorted(rows_in_verify)}"
    assert runs["spec"][0]["token_ids"] == reference[0], "the speculating row differs from HF greedy"
    for i in range(1, len(params)):
        assert_same([runs["spec"][i]["token_ids"]], [runs["plain"][i]["token_ids"]], f"row {i} ({params[i]})")
    assert_close(torch.tensor(runs["spec"][1]["logprobs"]), torch.tensor(runs["plain"][1]["logprobs"]), 1e-5,
                 "log-probabilities of a row beside speculating ones")


@pytest.mark.stubs(*RUN_STUBS)
def test_chunked_prefill_mixed_batches_and_a_radix_hit(prompts, reference):
    """Prompts prefilled in chunks of 8 tokens, running requests decoding inside the prefill chunks (mixed batches,
    which never speculate) and speculating once no prompt waits; then the same prompts again, found in the radix
    cache. Both runs are HF greedy."""
    llm = make_llm(spec("draft", 2, draft=NAME), page_size=4, max_extend_tokens=8, enable_mixed_chunk=True,
                   max_running_reqs=4)
    computed = []
    llm.scheduler.on_batch = lambda b: computed.append(sum(r.extend_len for r in b.prefill_reqs))
    staggered = [greedy(6 + 6 * i) for i in range(len(prompts))]
    first = [o["token_ids"] for o in llm.generate(prompts, staggered)]
    assert_same(first, [r[:6 + 6 * i] for i, r in enumerate(reference)], "chunked, mixed and speculating")
    phases = collections.Counter(phase for phase, _ in llm.scheduler.history)
    assert phases["mixed"] and phases["verify"], f"batches by phase: {dict(phases)}"
    assert all(c <= 8 for c in computed), f"a prefill computed more than the budget: {computed}"
    computed.clear()
    again = [o["token_ids"] for o in llm.generate(prompts, greedy())]
    assert_same(again, reference, "the same prompts again")
    assert sum(computed) < sum(len(p) for p in prompts) // 2, \
        f"the second run computed {sum(computed)} prompt tokens: the prompts were not found in the radix cache"
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
def test_optimistic_admission_retracts_and_drafts_take_only_pages_that_exist(prompts, reference):
    """A pool too small for every answer at once, optimistic admission: requests are retracted and recomputed, and
    drafts that find no page left are dropped for the step. The answers stay HF greedy."""
    from minisgl.scheduler.retract import NewTokenRatio

    llm = make_llm(spec("draft", 4, draft=NAME), page_size=4, num_pages=26, admission="optimistic",
                   new_token_ratio=NewTokenRatio(0.1, 0.1, 1))
    fit, dropped = llm.scheduler.speculation.fit_drafts, []

    def counting(reqs, drafts):
        fitted = fit(reqs, drafts)
        dropped.extend(r.uid for r, d, f in zip(reqs, drafts, fitted) if d and not f)
        return fitted

    llm.scheduler.speculation.fit_drafts = counting
    got = [o["token_ids"] for o in llm.generate(prompts, greedy())]
    assert_same(got, reference, "optimistic admission on a tight pool")
    assert llm.scheduler.admission.num_retractions > 0, "the pool should have been too small without retracting"
    assert dropped, "no row's drafts were dropped for lack of pages: the fixture lost its point"
    assert llm.scheduler.speculation.stats.verify_steps > 0
    assert_clean(llm)


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("method", ["ngram", "draft", "eagle"])
def test_overlap_on_and_off_give_the_same_tokens_with_retraction_and_chunked_prefill(prompts, reference, method,
                                                                                    request):
    """Overlap scheduling stays on while speculating: a verify step is launched without waiting and its decisions are
    read when the step is processed. On a tight pool with optimistic admission (retractions) and prompts prefilled in
    chunks of 8 tokens, overlap on and off give the same tokens, HF's, with every proposer; the pages are exact after
    every step, verify steps in flight included."""
    from minisgl.scheduler.retract import NewTokenRatio

    config = (SpecConfig("eagle", 3, draft_model_path=request.getfixturevalue("eagle_head")[0]) if method == "eagle"
              else spec(method, 3, draft=NAME))
    answers = {}
    for overlap in (False, True):
        llm = make_llm(config, page_size=4, overlap=overlap, num_pages=26, admission="optimistic",
                       new_token_ratio=NewTokenRatio(0.1, 0.1, 1), max_extend_tokens=8)
        sched = llm.scheduler
        chunked = set()
        sched.on_batch = lambda b: chunked.update(r.uid for r in b.reqs if isinstance(r, ChunkedReq))
        for uid, p in enumerate(prompts):
            sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy()))
        sched.run_until_idle(sched.check_integrity)
        answers[overlap] = got = [sched.finished.pop(uid).output_ids for uid in range(len(prompts))]
        what = f"{method}, overlap {'on' if overlap else 'off'}"
        assert_same(got, reference, what)
        assert sched.admission.num_retractions > 0, f"{what}: the pool should have been too small without retracting"
        assert chunked, f"{what}: no prompt was prefilled in chunks"
        assert sched.speculation.stats.verify_steps > 0, f"{what}: nothing was verified"
        assert not sched.speculation.in_flight, f"{what}: verify steps left unsettled: {sched.speculation.in_flight}"
        assert_clean(llm)
    assert_same(answers[True], answers[False], f"{method}: overlap on against off")


@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_an_abort_mid_speculation_frees_everything(prompts, reference, overlap):
    llm = make_llm(spec("draft", 3), page_size=4, overlap=overlap)
    sched = llm.scheduler
    for uid in (0, 1):
        sched.add_request(PendingReq(uid, torch.tensor(prompts[uid], dtype=torch.int32), greedy()))
    last = None
    while sched.speculation.stats.verify_steps < 3 or (overlap and not last.batch.is_verify):
        last = sched.overlap_step(last) if overlap else sched.step()
    if overlap:  # the abort lands while a verify step of request 0 is launched and not yet processed
        assert 0 in sched.speculation.in_flight, "request 0 should be in the verify step in flight"
    assert sched.abort_request(0), "request 0 was running"
    assert 0 not in sched.speculation.proposer.kept, "the draft keeps nothing for an aborted request"
    sched.check_integrity()
    if overlap:
        while last is not None or not sched.idle:
            last = sched.overlap_step(last)
    else:
        sched.run_until_idle()
    assert 0 not in sched.finished and sched.finished.pop(1).output_ids == reference[1]
    assert not sched.speculation.proposer.kept, "finished requests leave nothing in the draft"
    assert_clean(llm)


# --- sampled answers: the model's distribution ------------------------------------------------------------------

def sampled_prompt(method: str) -> list[int]:
    """TEXTS[1]; for n-gram lookup followed by 150 distinct tokens that include each of the 3 most likely first
    tokens, so that lookup finds every first token earlier in the prompt and proposes what followed it there."""
    text = tokenizer(NAME).encode(TEXTS[1])
    if method == "draft":
        return text
    return text + (torch.randperm(1021, generator=torch.Generator().manual_seed(48))[:150] + 3).tolist()


TEMPERATURE, TOP_K = 2.0, 3


def exact_joint(prompt: list[int]) -> dict[tuple[int, int], float]:
    """P(first two tokens) at TEMPERATURE and TOP_K, from Hugging Face's logits in float64."""
    def top(logits: torch.Tensor) -> dict[int, float]:
        probs = (logits.double() / TEMPERATURE).softmax(-1).topk(TOP_K)
        return dict(zip(probs.indices.tolist(), (probs.values / probs.values.sum()).tolist()))

    def compute():
        with torch.inference_mode():
            first = top(hf_model(NAME)(torch.tensor([prompt])).logits[0, -1])
            joint = []
            for t1, p1 in first.items():
                second = top(hf_model(NAME)(torch.tensor([prompt + [t1]])).logits[0, -1])
                joint += [[t1, t2, p1 * p2] for t2, p2 in second.items()]
        return joint

    return {(a, b): p for a, b, p in hf_cached(NAME, ["joint-2", list(prompt), TEMPERATURE, TOP_K], compute)}


@pytest.mark.stubs("accept_rejection", "ngram_lookup", *RUN_STUBS)
@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_sampled_speculation_keeps_the_joint_distribution_of_the_first_two_tokens(method):
    """1,200 samples of one prompt (temperature 2, top-k 3, 3 tokens each): token 1 comes from the prefill, token 2
    from a verify step that checks one draft (n-gram: what followed token 1 in the prompt; draft: a draw from the
    draft model's q). The frequencies of (token 1, token 2) match the exact joint from HF's logits (chi-square)."""
    prompt = sampled_prompt(method)
    joint = exact_joint(prompt)
    firsts = {a for a, _ in joint}
    assert method != "ngram" or firsts <= set(prompt), \
        f"the fixture needs every likely first token {sorted(firsts)} inside the prompt"
    llm = LLM(model_path(NAME), max_running_reqs=64, max_seq_len=192, num_pages=16000, overlap=False,
              speculative=spec(method, 2))
    samples = 1200
    outs = llm.generate([prompt] * samples, SamplingParams(temperature=TEMPERATURE, top_k=TOP_K, max_tokens=3,
                                                           ignore_eos=True))
    stats = llm.scheduler.speculation.stats
    assert stats.proposed >= 0.9 * samples, f"most requests should check a draft for token 2: {stats}"
    cells = sorted(joint)
    pairs = collections.Counter((o["token_ids"][0], o["token_ids"][1]) for o in outs)
    outside = {pair: c for pair, c in pairs.items() if pair not in joint}
    assert not outside, f"pairs outside the top-{TOP_K} supports: {outside}"
    counts = torch.tensor([pairs[c] for c in cells])
    pvalue = chi_square_pvalue(counts, torch.tensor([joint[c] for c in cells], dtype=torch.float64), method)
    assert pvalue > 1e-3, (f"{method}: (token 1, token 2) frequencies {dict(zip(cells, (counts / samples).tolist()))} "
                           f"against the exact joint {joint} (chi-square p-value {pvalue:.1e}; {stats})")
    assert_clean(llm)


# --- EAGLE: a head over the target's features ------------------------------------------------------------------------

def tiny_head(seed: int = 0):
    """A small EagleHead with random weights (hidden 8, 2 query heads sharing 1 KV head), its vocabulary of 11."""
    from minisgl.spec.eagle import EagleHead, HeadConfig

    g = torch.Generator().manual_seed(seed)
    c = HeadConfig(hidden_size=8, intermediate_size=16, num_heads=2, num_kv_heads=1, head_dim=4, rope_base=10000.0,
                   rms_norm_eps=1e-6, vocab_size=11, draft_vocab_size=5, window=3)
    torch.manual_seed(seed)
    head = EagleHead(c, torch.randn(11, 8, generator=g), torch.rand(8, generator=g) + 0.5,
                     torch.randn(11, 8, generator=g), torch.tensor([0, 2, 3, 7, 10]))
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return head, g


def rms_norm64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@pytest.mark.stubs("EagleHead.forward")
def test_the_eagle_head_maps_feature_and_token_through_fc_layer_and_the_targets_norm():
    """Pair p = (f_p, token p + 1): the output is the target's final norm of layer(fc([f_p, embedding]))), in
    float64 against the head's own parts. With fc picking the feature half and a layer that adds nothing, the output
    is the normed feature; picking the embedding half, the normed embedding (order and norm both matter)."""
    from minisgl.spec.eagle import window_mask

    head, g = tiny_head()
    features, tokens = torch.randn(2, 5, 8, generator=g), torch.randint(0, 11, (2, 5), generator=g)
    positions = torch.arange(5).repeat(2, 1)
    mask = window_mask(torch.ones(2, 5, dtype=torch.bool), 3)
    got = head(features, tokens, positions, mask)
    h64 = head.double()
    want = rms_norm64(h64.layer(h64.fc(torch.cat([features.double(), h64.embed[tokens]], -1)), positions, mask),
                      h64.norm_weight, head.c.rms_norm_eps)
    assert got.shape == (2, 5, 8), f"one predicted feature per pair: got shape {tuple(got.shape)}, expected (2, 5, 8)"
    err = (got.double() - want).abs().max().item()
    assert err < 1e-4, f"norm(layer(fc([feature, embedding]))) differs from float64 by {err:.2e}"
    with torch.no_grad():
        head.layer.o_proj.weight.zero_()
        head.layer.down_proj.weight.zero_()  # the layer adds nothing: the output is the norm of fc's
        eye = torch.eye(8, dtype=torch.float64)
        for half, source in (("feature", features.double()), ("embedding", h64.embed[tokens])):
            head.fc.weight.copy_(torch.cat([eye, 0 * eye] if half == "feature" else [0 * eye, eye], 1))
            got = head(features.double(), tokens, positions, mask)
            want = rms_norm64(source, h64.norm_weight, head.c.rms_norm_eps)
            err = (got - want).abs().max().item()
            assert err < 1e-9, (f"fc reading only the {half} half (the feature comes first) should give the "
                                f"target-normed {half}; differs by {err:.2e}")


@pytest.fixture(scope="module")
def eagle_head(tmp_path_factory):
    """A head for tiny-qwen3 trained here by the course's recipe (tools/eagle.py) on a few seconds of CPU, and its
    training data (the target's greedy answers, features and tokens, recorded by the engine)."""
    from tools import eagle

    tok = tokenizer(NAME)
    llm = make_llm(None, max_running_reqs=12, cache_type="naive")
    data = eagle.collect(llm, [eagle.encode(tok, t) for t in eagle.prompts("train")[:12]], 32)
    head = eagle.new_head(llm.engine, data, 4096, 16)
    eagle.train(head, data, 120, lr=3e-3, progress=False)
    folder = tmp_path_factory.mktemp("tiny-qwen3-eagle")
    head.save(folder)
    return folder, head, data


def test_a_trained_eagle_head_predicts_the_targets_next_tokens_on_its_training_text(eagle_head):
    """Teacher-forced on the text it was trained on (target features, the true tokens), the head's first guess is
    the target's own greedy token at most positions: the head reads both its inputs and learned (the reference
    trains to 0.98; a head blind to its token or its feature stays far lower)."""
    from tools import eagle

    _, head, data = eagle_head
    acc = eagle.accuracy(head, data)
    assert acc >= 0.8, f"the trained head guesses the target's next token at {acc:.2f} of its training positions"


def test_sampled_training_answers_keep_the_targets_greedy_tokens_as_labels():
    """make draft --samples: answers sampled at a temperature are more text to learn from, but the label after each
    position stays the target's greedy token there (HF's argmax over the same tokens), not the token the sample drew.
    Positions whose top two logits are within 1e-4 are skipped: a float32 tie may break either way on another CPU."""
    from tools import eagle

    tok = tokenizer(NAME)
    llm = make_llm(None, max_running_reqs=4, cache_type="naive")
    data = eagle.collect(llm, [eagle.encode(tok, t) for t in eagle.prompts("train")[:4]], 16, temperature=1.0)
    drawn = 0
    for i, s in enumerate(data):
        logits = hf_logits(NAME, s.tokens[:-1].tolist())
        top2 = logits.topk(2).values
        clear = (top2[:, 0] - top2[:, 1]) > 1e-4
        want = logits.argmax(-1)
        wrong = ((want != s.next_tokens) & clear).nonzero().flatten().tolist()
        assert not wrong, (f"answer {i}: labels differ from the target's argmax at positions {wrong[:5]} (label "
                           f"{s.next_tokens[wrong[0]].item()}, HF argmax {want[wrong[0]].item()}, the answer's token "
                           f"{s.tokens[wrong[0] + 1].item()})")
        drawn += int((s.tokens[s.prompt_len:] != s.next_tokens[s.prompt_len - 1:]).sum())
    assert drawn > 0, "at temperature 1 some sampled answer token should differ from the target's greedy one"


@pytest.mark.stubs("EagleHead.forward")
def test_teacher_forced_accuracy_counts_the_guesses_drafting_makes_the_answers_tokens():
    """Pair p guesses token p + 2; drafting only ever guesses answer tokens after the first (pairs p >= prompt_len
    - 1). A head right on every prompt pair and wrong on every answer pair scores 0, the other way round 1; with
    prompts=True, every pair counts. (Counting the prompt's pairs, where a chat template's fixed system text is
    easy to guess, made a head look far better teacher-forced than it drafts.)"""
    from minisgl.spec.eagle import window_mask
    from tools import eagle

    head, g = tiny_head()
    length, prompt_len = 12, 5
    tokens = torch.randint(11, (length,), generator=g)
    features = torch.randn(length - 1, 8, generator=g)
    pairs = length - 2
    with torch.no_grad():
        hidden = head(features[None, :pairs], tokens[None, 1:pairs + 1], torch.arange(pairs)[None],
                      window_mask(torch.ones(1, pairs, dtype=torch.bool), head.c.window))
    guess = head.vocab_ids[head.logits(hidden).argmax(-1)][0]  # pair p's guess of token p + 2
    wrong = torch.tensor([t for t in range(11) if t not in head.vocab_ids.tolist()][0])  # never guessed
    answer = torch.arange(pairs) >= prompt_len - 1
    share = (prompt_len - 1) / pairs  # of the pairs, the prompt's
    for right_on, want, want_all in ((~answer, 0.0, share), (answer, 1.0, 1 - share)):
        labels = torch.full((length - 1,), int(wrong))
        labels[1:pairs + 1] = torch.where(right_on, guess, wrong)  # next_tokens[p + 1]: the label of pair p
        data = [eagle.Sequence(tokens, features, labels, prompt_len)]
        got, got_all = eagle.accuracy(head, data), eagle.accuracy(head, data, prompts=True)
        assert got == pytest.approx(want), f"answer pairs: {got}, expected {want}"
        assert got_all == pytest.approx(want_all), f"every pair: {got_all}, expected {want_all}"


def test_the_feature_tap_keeps_the_latest_positions_of_a_prefill_longer_than_its_ring(prompts):
    """Prefills of more positions than the tap's ring holds, several in one batch: each slot must end up with the
    feature of the latest position that maps to it (the one the owner table names), as a ring wide enough for the
    whole prompt has it."""
    from minisgl.spec.eagle import FeatureTap

    from tools import eagle

    llm = make_llm(None, cache_type="naive")
    small, wide = FeatureTap(llm.engine, 20), FeatureTap(llm.engine, 256)  # 20: a window of 16 and k = 3
    prompts = [eagle.encode(tokenizer(NAME), t) for t in eagle.prompts("train")[:2]] + prompts[:2]
    assert max(map(len, prompts)) > small.size, "a prompt should wrap the small ring"
    first = llm._next_uid
    llm.generate(prompts, greedy(1))
    for i, prompt in enumerate(prompts):
        row = int((wide.owner[:, 0, 0] == first + i).nonzero()[0][0])
        for p in range(max(len(prompt) - small.size, 0), len(prompt)):
            slot = p % small.size
            owner = tuple(small.owner[row, slot])
            assert owner == (first + i, p), f"request {i}: slot {slot} is said to hold {owner}, expected position {p}"
            same = torch.equal(small.features[row, slot], wide.features[row, p])
            assert same, f"request {i}: slot {slot} does not hold position {p}'s feature (an earlier position's?)"


def logit_gap(head, features, tokens, positions, valid, k: int, step: int, token: int) -> tuple[float, float]:
    """How far below the best logit `token` is at draft `step` of the head's own greedy chain (EagleHead.draft's
    steps), and the largest logit's magnitude there."""
    from minisgl.spec.eagle import window_mask

    for m in range(step + 1):
        hidden = head(features, tokens, positions, window_mask(valid, head.c.window + k))[:, -1]
        logits = head.logits(hidden)[0].double()
        guess = head.vocab_ids[logits.argmax()]
        features = torch.cat([features, hidden[:, None]], dim=1)
        tokens = torch.cat([tokens, guess.view(1, 1)], dim=1)
        positions = torch.cat([positions, positions[:, -1:] + 1], dim=1)
        valid = torch.cat([valid, valid.new_ones(1, 1)], dim=1)
    mine = logits[(head.vocab_ids == token).nonzero()[0, 0]] if (head.vocab_ids == token).any() else -math.inf
    return float(logits.max() - mine), float(logits.abs().max())


@pytest.mark.stubs("EagleHead.forward", *RUN_STUBS)
@pytest.mark.parametrize("overlap, page_size", [(False, 1), (True, 4)])
def test_eagle_drafts_in_the_engine_equal_the_heads_drafts_on_teacher_forced_inputs(eagle_head, prompts, overlap,
                                                                                   page_size):
    """Every proposal the engine makes (after prefill, after verify steps that kept all, some or none of the drafts)
    equals the head's own drafts over the features the target computes for the finished text, a prefill of it: the
    pairs drafting reads are the ones training read (feature f_p with token p + 1, the same positions, the last
    `window` of them), with no stale or rejected position's feature in the ring."""
    from minisgl.spec.eagle import FeatureTap
    from tools import eagle

    folder, head, _ = eagle_head
    texts = [eagle.encode(tokenizer(NAME), t) for t in eagle.prompts("train")[:2]] + prompts[:2]  # known, unknown
    llm = make_llm(SpecConfig("eagle", 3, draft_model_path=folder), page_size, overlap, cache_type="naive")
    proposer = llm.scheduler.speculation.proposer
    seen, propose = [], proposer.propose

    def recorded(reqs, ks):
        drafts = propose(reqs, ks)
        seen.extend((r.uid, len(r.input_ids), d) for r, d in zip(reqs, drafts) if d)
        return drafts

    proposer.propose = recorded
    first = llm._next_uid
    outs = llm.generate(texts, greedy(32))
    full = [t + o["token_ids"] for t, o in zip(texts, outs)]
    ref = make_llm(None, cache_type="naive")
    tap = FeatureTap(ref.engine, ref.engine.page_table.shape[1])
    base = ref._next_uid
    ref.generate(full, greedy(1))
    window, kept = head.c.window, llm.scheduler.speculation.stats
    assert 0 < kept.accepted < kept.proposed, f"the run should keep some drafts and reject others: {kept}"
    for uid, n, drafts in seen:
        i = uid - first
        row = int((tap.owner[:, 0, 0] == base + i).nonzero()[0][0])
        span = torch.arange(max(n - 1 - window, 0), n - 1)  # pairs (f_p, token p + 1) up to the last token
        chain = (tap.features[row, span][None].to(head.lm_rows.dtype), torch.tensor(full[i])[span + 1][None],
                 span[None], torch.ones(1, len(span), dtype=torch.bool))
        want = head.draft(*chain, len(drafts))[0].tolist()
        if drafts != want:  # allowed only where the head's two best logits tie within float32's rounding
            j = next(j for j, (a, b) in enumerate(zip(drafts, want)) if a != b)
            gap, scale = logit_gap(head, *chain, len(drafts), j, drafts[j])
            assert gap <= 1e-5 * scale, (f"request {i}, {n} tokens: the engine drafted {drafts}, the head on the "
                                         f"teacher-forced pairs drafts {want}; at draft {j} its logit for "
                                         f"{drafts[j]} is {gap:.3g} below the best (logits up to {scale:.3g})")
    assert_clean(llm)


@pytest.mark.stubs("EagleHead.forward")
def test_the_training_time_test_chains_guesses_as_drafting_does():
    """make draft's unrolled chain (tools/eagle.py) gives, at every step, what the head itself gives over the whole
    chain of pairs (the cached keys and values change no sum), and, where the real tokens are the head's guesses,
    the chain from pair i guesses what drafting from the window ending at pair i guesses: training scores the
    drafts the engine will make."""
    from minisgl.spec.eagle import window_mask
    from tools import eagle

    head, g = tiny_head()
    head = head.double()
    b, length, steps, window = 2, 7, 3, head.c.window
    features = torch.randn(b, length, 8, generator=g, dtype=torch.float64)
    tokens = torch.randint(11, (b, length), generator=g)
    positions = torch.arange(length).repeat(b, 1)
    valid = torch.ones(b, length, dtype=torch.bool)
    valid[1, 5:] = False
    got = eagle.unrolled(head, features, tokens, positions, valid, steps)
    feats, toks, poss = [features], [tokens], [positions]
    for m in range(steps):
        whole = head(torch.cat(feats, 1), torch.cat(toks, 1), torch.cat(poss, 1),
                     eagle.chain_mask(valid, window, m + 1))[:, m * length:]
        assert torch.allclose(got[m], whole, atol=1e-12), f"chain step {m + 1} differs from the head over the chain"
        feats.append(whole)
        toks.append(eagle.shift(tokens, m + 1))
        poss.append(positions + m + 1)
    for i in (3, 4):  # pair i is the last one drafting knows; its window holds pairs i - 2 .. i
        span = slice(i - window + 1, i + 1)
        f, t, pos = features[:1, span], tokens[:1, span], positions[:1, span]
        for m in range(steps):  # drafting's passes, with the real token after each guess
            hidden = head(f, t, pos, window_mask(torch.ones(1, f.shape[1], dtype=torch.bool), window + steps))[:, -1]
            assert torch.allclose(hidden[0], got[m][0, i], atol=1e-12), f"pair {i}, step {m + 1}"
            if m + 1 == steps:
                break
            f, t, pos = torch.cat([f, hidden[:, None]], 1), torch.cat([t, tokens[:1, i + m + 1, None]], 1), \
                torch.cat([pos, pos[:, -1:] + 1], 1)
        drafted = head.draft(features[:1, span], tokens[:1, span], positions[:1, span],
                             torch.ones(1, window, dtype=torch.bool), steps)[0]
        real = tokens.clone()
        real[0, i + 1: i + steps] = drafted[: steps - 1]  # where the target agrees with the drafts so far
        chained = [int(head.vocab_ids[head.logits(h[0, i]).argmax()]) for h in
                   eagle.unrolled(head, features, real, positions, valid, steps)]
        assert chained == drafted.tolist()


@pytest.mark.stubs("EagleHead.forward", *RUN_STUBS)
@pytest.mark.parametrize("k, overlap, page_size", [(1, False, 1), (2, True, 4), (3, False, 4), (4, True, 1)])
def test_eagle_greedy_answers_equal_hf_and_the_answers_without_speculation(prompts, reference, plain_answers,
                                                                           eagle_head, k, overlap, page_size):
    llm = make_llm(SpecConfig("eagle", k, draft_model_path=eagle_head[0]), page_size, overlap)
    got = [o["token_ids"] for o in llm.generate(prompts, greedy())]
    assert_same(got, reference, f"eagle, k={k}, against HF greedy")
    assert_same(got, plain_answers[page_size], f"eagle, k={k}, against the engine without speculation")
    stats = llm.scheduler.speculation.stats
    assert stats.verify_steps > 0 and stats.proposed > 0, f"nothing was speculated: {stats}"
    assert_clean(llm)


def test_eagle_drafts_from_the_features_of_its_own_request_only(eagle_head, prompts):
    """Two requests take turns in one table row: the second's window holds only its own positions, never the first
    request's features left in the row's ring."""
    llm = make_llm(SpecConfig("eagle", 2, draft_model_path=eagle_head[0]), max_running_reqs=1)
    proposer = llm.scheduler.speculation.proposer
    llm.generate(prompts[:1], greedy(max_tokens=20))
    req = Req(torch.tensor(prompts[1][:3]), 0, 2, 1, 99, greedy())
    assert proposer.tap.window(req, 2, 16) == 2, "a new request found features of the previous one in its row"


# --- bad input --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(method="medusa"), "SpecConfig.method must be one of ngram, draft, eagle, got 'medusa'"),
    (dict(num_tokens=0), "SpecConfig.num_tokens must be an integer >= 1, got 0"),
    (dict(num_tokens=True), "SpecConfig.num_tokens must be an integer >= 1"),
    (dict(min_n=0), "SpecConfig.min_n must be an integer >= 1"),
    (dict(min_n=3, max_n=2), r"SpecConfig.max_n \(2\) must be >= SpecConfig.min_n \(3\)"),
    (dict(method="draft"), "SpecConfig.draft_model_path is needed for method 'draft'"),
    (dict(method="draft", draft_model_path="/no/such/model"), "is not a model folder"),
    (dict(draft_model_path="models/x"), "SpecConfig.draft_model_path is only for method 'draft'"),
    (dict(method="eagle"), "SpecConfig.draft_model_path is needed for method 'eagle'"),
    (dict(method="eagle", draft_model_path="/no/such/head"), "is not an EAGLE head folder.*no eagle.json"),
])
def test_a_bad_spec_config_is_a_value_error_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpecConfig(**kwargs)


def test_bad_speculative_settings_are_refused_before_an_engine_is_built(monkeypatch):
    import minisgl.llm.llm as llm_module

    def no_engine(*args, **kwargs):
        raise AssertionError("an engine was built before the settings were checked")

    monkeypatch.setattr(llm_module, "Engine", no_engine)
    with pytest.raises(ValueError, match="speculative must be a SpecConfig or None, got dict"):
        LLM(model_path(NAME), speculative={"method": "ngram"})
    with pytest.raises(ValueError, match="with a draft model runs with tp_size 1 only"):
        LLM(model_path(NAME), tp_size=2, speculative=spec("draft", 2))


def test_a_draft_model_with_another_vocabulary_is_refused_naming_both():
    draft, target = model_path("smollm2"), model_path(NAME)
    with pytest.raises(ValueError, match="vocabulary") as refused:
        make_llm(SpecConfig("draft", 2, draft_model_path=draft))
    assert str(draft) in str(refused.value) and str(target) in str(refused.value), str(refused.value)
    assert "49152" in str(refused.value) and "1024" in str(refused.value), str(refused.value)


def test_a_draft_whose_kv_regions_do_not_fit_is_refused():
    """16 rows x 512 positions x 512 bytes per token (one layer, 2 KV heads of 32 float32 values, keys and values)
    is 4 MiB: more than cpu_kv_cache_mb=1."""
    with pytest.raises(ValueError, match=r"the draft model's KV regions need 4 MiB \(max_running_reqs 16 x "
                                         r"max_seq_len 512 tokens\), more than the 1 MiB of cpu_kv_cache_mb"):
        make_llm(spec("draft", 2), max_running_reqs=16, max_seq_len=512, cpu_kv_cache_mb=1)


# --- the server -------------------------------------------------------------------------------------------------

@pytest.mark.stubs("Scheduler.record_run", "Engine.complete_verify", "accept_greedy", "CacheManager.free_rejected",
                   "Speculation.draft_lengths")
def test_the_scheduler_process_sends_each_token_of_a_run_and_marks_only_the_last_finished(prompts, reference):
    """SchedulerIO with the target as its own draft (every draft accepted, several tokens a step): one message per
    token, in order, and only the request's very last one marked finished."""
    from minisgl.engine import Engine, EngineConfig
    from minisgl.message import UserMsg
    from minisgl.scheduler.io import SchedulerIO
    from minisgl.scheduler.scheduler import Scheduler

    class Queue:
        def __init__(self):
            self.items, self.sent = [], []

        def get(self, timeout=None):
            return self.items.pop(0) if self.items else None

        def put(self, msg):
            self.sent.extend(getattr(msg, "data", [msg]))

    engine = Engine(EngineConfig(model_path(NAME), max_running_reqs=4, max_seq_len=256, num_pages=1024))
    sched = Scheduler(engine, SchedulerConfig(overlap=True, speculative=spec("draft", 3, draft=NAME)))
    inbox, outbox = Queue(), Queue()
    io = SchedulerIO(sched, inbox, outbox)
    inbox.items += [UserMsg(uid, torch.tensor(p, dtype=torch.int32), greedy(7 + 5 * uid))
                    for uid, p in enumerate(prompts[:3])]
    io.run_forever(alive=lambda: False)
    for uid in range(3):
        msgs = [m for m in token_rows(outbox.sent) if m.uid == uid]
        assert [m.next_token for m in msgs] == reference[uid][:7 + 5 * uid], f"request {uid}: tokens sent"
        assert [m.finished for m in msgs] == [False] * (len(msgs) - 1) + [True], \
            f"request {uid}: finished flags {[m.finished for m in msgs]}"
    assert sched.speculation.stats.accepted > 0
    assert io.status()["draft_tokens_accepted"] == sched.speculation.stats.accepted
    assert_clean(sched)


@pytest.mark.stubs("ngram_lookup", "Scheduler.record_run", "Engine.complete_verify", "accept_greedy",
                   "CacheManager.free_rejected", "Speculation.draft_lengths")
def test_a_server_with_ngram_speculation_answers_as_without(prompts, reference):
    import httpx

    from minisgl.server.local import LocalServer

    ngram_lookup([1, 2, 1], 1, 1, 1)  # on the skeleton, the stub fails here, in this process, not in the server's
    flags = ("--speculative-algorithm", "ngram", "--speculative-num-draft-tokens", "3", "--speculative-backoff", "off",
             "--max-running-reqs", "4", "--max-seq-len", "256", "--cpu-kv-cache-mb", "16")
    with LocalServer(model_path(NAME), *flags, echo=False) as server:
        for i in (0, 1):
            r = httpx.post(server.url + "/v1/completions", timeout=120, json={
                "model": NAME, "prompt": prompts[i], "max_tokens": N, "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200, r.text
            text = r.json()["choices"][0]["text"]
            assert text == tokenizer(NAME).decode(reference[i]), f"prompt {i}: {text!r}"
            assert r.json()["usage"]["completion_tokens"] == N
        health = httpx.get(server.url + "/health", timeout=30).json()
    assert health["verify_steps"] > 0 and health["draft_tokens_proposed"] > 0, f"the server speculated not: {health}"


@pytest.mark.parametrize("argv, match", [
    (["--speculative-num-draft-tokens", "3"], "--speculative-num-draft-tokens needs --speculative-algorithm"),
    (["--speculative-algorithm", "draft"], "--speculative-draft-model-path is needed for --speculative-algorithm "
                                           "'draft'"),
    (["--speculative-algorithm", "ngram", "--speculative-draft-model-path", "models/x"],
     "--speculative-draft-model-path is only for --speculative-algorithm 'draft'"),
    (["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "0"],
     "--speculative-num-draft-tokens must be an integer >= 1, got 0"),
    (["--speculative-algorithm", "medusa"], "invalid choice: 'medusa'"),
    (["--speculative-algorithm", "ngram", "--speculative-backoff", "no"], "expected on or off, got 'no'"),
    (["--speculative-backoff", "off"], "--speculative-backoff needs --speculative-algorithm"),
])
def test_bad_speculative_flags_stop_the_server_at_start_up(capsys, argv, match):
    from minisgl.server.args import parse_args

    with pytest.raises(SystemExit) as stopped:
        parse_args(["--model", str(model_path(NAME)), *argv])
    assert stopped.value.code == 2
    assert match in capsys.readouterr().err


def test_the_speculative_flags_reach_the_scheduler():
    from minisgl.server.args import parse_args

    args = parse_args(["--model", "m", "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5",
                       "--speculative-ngram-max-match-window-size", "4"])
    assert args.scheduler_config.speculative == SpecConfig("ngram", 5, max_n=4)
    assert args.scheduler_config.speculative.backoff, "steps that gain nothing back off by default"
    off = parse_args(["--model", "m", "--speculative-algorithm", "ngram", "--speculative-backoff", "off"])
    assert off.scheduler_config.speculative == SpecConfig("ngram", backoff=False)
    assert parse_args(["--model", "m"]).scheduler_config.speculative is None, "speculation is off by default"


# --- the verify step's attention --------------------------------------------------------------------------------

@needs_triton
@pytest.mark.anydevice
@pytest.mark.parametrize("splits", [1, 2, 8])
def test_the_decode_kernel_attends_verify_rows_causally(splits):
    """A verify batch whose rows are all k + 1 tokens wide (what a replayed verify graph runs) goes to the decode
    kernel, each request's queries in one tile: query j of a request of length n sees keys 0 .. n - width + j only
    (float64 reference, GQA groups of 3). With 8 splits of 16 keys the last slice of the requests of 18 and 66 holds
    keys that their early queries may not see: the merge must leave that slice out for them."""
    from minisgl.kernel.triton.attention import paged_decode_attention

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    width, lens = 5, [5, 18, 37, 66, 129]
    hq, hkv, dim = 6, 2, 32
    k_cache, v_cache, table, rows = scattered_kv_cache(lens, hkv, dim, torch.float32, seed=11, device=device)
    q = torch.randn(len(lens) * width, hq, dim, generator=torch.Generator().manual_seed(12)).to(device)
    seq = torch.tensor(lens, dtype=torch.int32, device=device)
    out = paged_decode_attention(q, k_cache, v_cache, table, rows, seq, dim ** -0.5, block_n=16, splits=splits,
                                 width=width)
    for i, n in enumerate(lens):
        span = slice(i * width, (i + 1) * width)
        want = attention_reference(q[span], k_cache, v_cache, table, rows[i], n, n - width)
        assert_close(out[span], want, 1e-5, f"request {i} (length {n}), {width} queries, {splits} splits", row="query")
    with pytest.raises(ValueError, match="width"):
        paged_decode_attention(q[:-1], k_cache, v_cache, table, rows, seq, dim ** -0.5, width=width)


@needs_triton
@pytest.mark.anydevice
@pytest.mark.stubs(*RUN_STUBS)
def test_verify_steps_on_the_triton_backend_give_hf_answers(prompts, reference, monkeypatch):
    """The Triton backend (its interpreter on a CPU; CUDA graphs on a GPU, float32), verify graphs up to 4 rows: a replayed verify step has every
    row k + 1 tokens wide, so its attention is the decode kernel's verify rows; with scripted drafts of every
    acceptance count the answers are HF's and the pages exact after every step."""
    from minisgl.attention import triton_backend

    widths = []
    verify_attention = triton_backend.verify_attention
    monkeypatch.setattr(triton_backend, "verify_attention",
                        lambda q, *args: widths.append(args[-2].width) or verify_attention(q, *args))
    k = 3
    device = "cuda" if torch.cuda.is_available() else "cpu"
    llm = make_llm(spec("ngram", k), page_size=4, attention_backend="triton", cuda_graph_max_bs=4, device=device,
                   dtype="float32")
    sched = llm.scheduler
    truth = {uid: p + r for uid, (p, r) in enumerate(zip(prompts, reference))}
    sched.speculation.proposer = ScriptedProposer(truth, one_in_three)
    for uid, p in enumerate(prompts[:2]):
        sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy(12)))
    sched.run_until_idle(sched.check_integrity)
    got = [sched.finished.pop(uid).output_ids for uid in range(2)]
    assert_same(got, [r[:12] for r in reference[:2]], "verify steps on the Triton backend")
    assert widths and set(widths) == {k + 1}, f"verify attention ran with widths {sorted(set(widths))}, expected {k + 1}"
    assert_clean(llm)


@needs_triton
@pytest.mark.anydevice
@pytest.mark.stubs(*RUN_STUBS)
def test_a_verify_graphs_padded_tokens_write_no_other_requests_kv(prompts, reference):
    """A verify graph pads a row of fewer than k drafts to k + 1 tokens. Past its real tokens the row's page-table
    entries are not its own (here: set to the slots of another request's prompt, as a reused table row leaves them),
    so a padded token must write its key and value to the padding slot: the other request's KV stays as it was."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    k = 3
    llm = make_llm(spec("ngram", k), attention_backend="triton", cuda_graph_max_bs=4, device=device, dtype="float32")
    sched, engine = llm.scheduler, llm.engine
    truth = {uid: p + r for uid, (p, r) in enumerate(zip(prompts, reference))}
    sched.speculation.proposer = ScriptedProposer(truth, lambda uid, pos: False)
    propose = sched.speculation.proposer.propose
    sched.speculation.proposer.propose = lambda reqs, ks: [d[:1] for d in propose(reqs, ks)]  # 1 draft of k
    for uid, p in enumerate(prompts[:2]):
        sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy()))
    while sched.prefill_manager.pending:
        sched.step()
    batch = sched.speculation.speculate(sched.decode_manager.schedule_next_batch(), set())
    assert batch is not None and batch.is_verify and batch.size == 2, "the scripted drafts make a verify batch"
    ends = [r.device_len for r in batch.reqs]
    sched.prepare_batch(batch)
    first, other = batch.reqs
    past = slice(first.device_len, first.cached_len + k + 1)  # the padded positions of the first row
    victims = engine.page_table[other.table_idx, : past.stop - past.start].clone()
    saved = engine.page_table[first.table_idx, past].clone()
    engine.page_table[first.table_idx, past] = victims
    before = [engine.kv_cache.k_cache(layer)[victims.long()].clone() for layer in range(2)]
    assert engine.verify_graphs.can_use(batch)
    engine.forward_logits(batch)
    engine.page_table[first.table_idx, past] = saved
    for layer, kv in enumerate(before):
        kept = torch.equal(engine.kv_cache.k_cache(layer)[victims.long()], kv)
        assert kept, f"layer {layer}: a padded token of request {first.uid} wrote into request {other.uid}'s keys"
    sched.cache_manager.release_paged(batch.reqs, ends)
    for req in batch.reqs:
        req.device_len = req.cached_len + 1
    sched.run_until_idle()
    assert_clean(llm)


# --- the GPU ------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.stubs("ngram_lookup", *RUN_STUBS)
@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap"])
def test_speculation_on_the_gpu_with_cuda_graphs(prompts, reference, overlap):
    """CUDA, float32, CUDA graphs up to batch 8, overlap on and off: both proposers give HF greedy answers; decode
    steps (a batch without drafts) and verify steps replay graphs of their own."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    for method in ("ngram", "draft"):
        llm = LLM(model_path(NAME), device="cuda", dtype="float32", max_running_reqs=8, max_seq_len=256,
                  num_pages=1024, overlap=overlap, cuda_graph_max_bs=8, speculative=spec(method, 3))
        replays = []
        for runner in (llm.engine.graph_runner, llm.engine.verify_graphs):
            replay = runner.replay
            runner.replay = lambda batch, replay=replay: replays.append(batch.phase) or replay(batch)
        got = [o["token_ids"] for o in llm.generate(prompts, greedy())]
        assert_same(got, reference, f"{method} on the GPU")
        phases = collections.Counter(phase for phase, _ in llm.scheduler.history)
        assert phases["verify"] > 0, f"{method}: batches by phase {dict(phases)}"
        replayed = collections.Counter(replays)
        assert replayed["decode"] == phases["decode"] and replayed["verify"] == phases["verify"], \
            f"{method}: graphs replayed for {dict(replayed)}, batches {dict(phases)}"
        assert_clean(llm)


@pytest.mark.gpu
@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("method", ["ngram", "draft", "eagle"])
def test_overlap_while_speculating_on_the_gpu_with_graphs_retraction_and_chunks(prompts, reference, method, request):
    """CUDA, float32, decode and verify graphs, a tight pool with optimistic admission (retractions), prompts in chunks
    of 8 tokens: with overlap on, every verify step is launched without waiting (its decisions come back through an
    event, like a decode step's tokens), and overlap on and off give HF's answers with every proposer, the pages exact
    after every step. EAGLE reads the target's hidden states from eager passes, so its target runs without graphs."""
    from minisgl.scheduler.retract import NewTokenRatio

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    config = (SpecConfig("eagle", 3, draft_model_path=request.getfixturevalue("eagle_head")[0]) if method == "eagle"
              else spec(method, 3, draft=NAME))
    for overlap in (False, True):
        llm = LLM(model_path(NAME), device="cuda", dtype="float32", max_running_reqs=8, max_seq_len=256, page_size=4,
                  num_pages=26, admission="optimistic", new_token_ratio=NewTokenRatio(0.1, 0.1, 1),
                  max_extend_tokens=8, overlap=overlap, cuda_graph_max_bs=0 if method == "eagle" else 8,
                  speculative=config)
        sched, what = llm.scheduler, f"{method}, overlap {'on' if overlap else 'off'}"
        launch, waits = sched._launch, []

        def launched(batch, launch=launch, waits=waits):
            data = launch(batch)
            if batch.is_verify:
                waits.append(data.ready is None)  # None: the launch read the decisions back itself
            return data

        sched._launch = launched
        replays, graphs = [], llm.engine.verify_graphs  # None for EAGLE: no graphs
        if graphs is not None:
            replay = graphs.replay
            graphs.replay = lambda batch: replays.append(batch.size) or replay(batch)
        for uid, p in enumerate(prompts):
            sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy()))
        sched.run_until_idle(sched.check_integrity)
        got = [sched.finished.pop(uid).output_ids for uid in range(len(prompts))]
        assert_same(got, reference, what)
        assert sched.admission.num_retractions > 0, f"{what}: the pool should have been too small without retracting"
        assert waits and not any(waits), f"{what}: {sum(waits)} of {len(waits)} verify launches waited for the device"
        assert replays or graphs is None, f"{what}: no verify step replayed a graph"
        assert_clean(llm)


@pytest.mark.gpu
@pytest.mark.stubs(*RUN_STUBS)
@pytest.mark.parametrize("backend, page_size", [("hybrid", 256), ("triton", 1)])
def test_a_replayed_verify_graph_gives_the_eager_passs_logits(prompts, reference, backend, page_size):
    """bfloat16 on the GPU: one verify step of rows with 3, 0, 2 and 1 drafts, replayed from its graph and run eagerly
    on the same prepared batch, gives the same logits (within bfloat16's rounding); flash-attn's prefill kernel lines
    its queries up with the last keys, so this fails if a padded row's length is not padded too. The step is then
    undone (its pages given back) and the requests finish clean."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if backend == "hybrid":
        pytest.importorskip("flash_attn")
    k = 3
    llm = LLM(model_path(NAME), device="cuda", dtype="bfloat16", max_running_reqs=8, max_seq_len=512,
              num_pages=4096 // page_size, page_size=page_size, attention_backend=backend, cuda_graph_max_bs=8,
              overlap=False, speculative=spec("ngram", k))
    sched, engine = llm.scheduler, llm.engine
    truth = {uid: p + r for uid, (p, r) in enumerate(zip(prompts, reference))}
    lengths = iter([3, 0, 2, 1] * 1000)
    sched.speculation.proposer = ScriptedProposer(truth, lambda uid, pos: False)
    propose = sched.speculation.proposer.propose
    sched.speculation.proposer.propose = lambda reqs, ks: [d[:next(lengths)] for d in propose(reqs, ks)]
    for uid, p in enumerate(prompts):
        sched.add_request(PendingReq(uid, torch.tensor(p, dtype=torch.int32), greedy()))
    while sched.prefill_manager.pending:
        sched.step()
    batch = sched.speculation.speculate(sched.decode_manager.schedule_next_batch(), set())
    assert batch is not None and batch.is_verify, "the scripted drafts make a verify batch"
    ends = [r.device_len for r in batch.reqs]
    sched.prepare_batch(batch)
    assert engine.verify_graphs.can_use(batch)
    graph = engine.forward_logits(batch).float()
    saved, engine.verify_graphs = engine.verify_graphs, None
    eager = engine.forward_logits(batch).float()
    engine.verify_graphs = saved
    assert_close(graph, eager, 2e-2, f"{backend}: verify logits, replayed against eager", row="token")
    sched.cache_manager.release_paged(batch.reqs, ends)
    for req in batch.reqs:
        req.device_len = req.cached_len + 1
    sched.run_until_idle()
    assert_clean(llm)
