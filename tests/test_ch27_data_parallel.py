"""Chapter 27: data-parallel serving behind sglang-router. The approximate radix tree and the cache-aware policy
against brute-force oracles (every text ever sent, compared character by character), the policy against the real
router's choices on the same trace (fake workers that hold each request until the test lets it finish), the
SGLang fields and info routes the router needs from our server, and N servers behind the real router answering as
Hugging Face greedy does.

The real router is sglang-router from PyPI (`make router` puts it in build/sglang-router); without it those tests
skip and say so."""

from __future__ import annotations

import itertools
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from helpers import CHAT, ROOT, TEXTS, hf_greedy, model_path, tokenizer
from minisgl.router import (ApproxTree, CacheAwareConfig, CacheAwarePolicy, RoundRobinPolicy, chat_workload,
                            interleave, is_imbalanced)

ROUTER_PYTHON = ROOT / "build" / "sglang-router" / "bin" / "python"
needs_router = pytest.mark.skipif(not ROUTER_PYTHON.exists(), reason="sglang-router is not installed: `make router` "
                                  "puts it in build/sglang-router (a wheel from PyPI, ~150 MB)")
ROUTER = [str(ROUTER_PYTHON), "-m", "sglang_router.launch_router"]
NAME = "tiny-qwen3"


# --- the oracles: every text ever inserted, compared by brute force ----------------------------------------------

def lcp(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class TextsOracle:
    """One worker's texts with their epochs: the longest match is the longest common prefix with any of them, its
    epoch the first text that matches that far."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, int]] = []

    def insert(self, text: str, epoch: int) -> None:
        self.texts.append((text, epoch))

    def match(self, text: str) -> tuple[int, int]:
        best = max((lcp(text, t) for t, _ in self.texts), default=0)
        if best == 0:
            return 0, -1
        return best, min(e for t, e in self.texts if lcp(text, t) >= best)

    def size(self) -> int:
        """Characters a radix tree of these texts stores: one per distinct non-empty prefix."""
        return len({t[:i] for t, _ in self.texts for i in range(1, len(t) + 1)})


class PolicyOracle:
    """The cache-aware rules of the router's documentation, over TextsOracles."""

    def __init__(self, n: int, config: CacheAwareConfig) -> None:
        self.config, self.trees, self.loads, self.epoch = config, [TextsOracle() for _ in range(n)], [0] * n, 0
        self.branches: list[str] = []  # which rule decided each request: the fixtures must reach all three

    def select(self, text: str) -> int:
        c, loads = self.config, self.loads
        least = loads.index(min(loads))
        if max(loads) - min(loads) > c.balance_abs_threshold and max(loads) > min(loads) * c.balance_rel_threshold:
            chosen, branch = least, "imbalanced"
        else:
            matches = [t.match(text) for t in self.trees]
            longest = max(m for m, _ in matches)
            best = min((e, i) for i, (m, e) in enumerate(matches) if m == longest)[1]
            hit = bool(text) and longest / len(text) > c.cache_threshold
            chosen, branch = (best, "cache hit") if hit else (least, "low match")
        self.branches.append(branch)
        self.trees[chosen].insert(text, self.epoch)
        self.epoch += 1
        loads[chosen] += 1
        return chosen

    def finish(self, worker: int) -> None:
        self.loads[worker] -= 1


def random_texts(seed: int, count: int, alphabet: str = "ab", longest: int = 12) -> list[str]:
    """Short texts over two letters: many shared prefixes, so inserts split nodes at every depth."""
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest))) for _ in range(count)]


# --- the approximate tree ----------------------------------------------------------------------------------------

@pytest.mark.stubs("ApproxTree.insert", "ApproxTree.match")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_tree_matches_what_any_inserted_text_shares_with_the_query(seed):
    """After every insert: each query's match length and epoch against the oracle, and the characters stored."""
    tree, oracle = ApproxTree(), TextsOracle()
    texts, queries = random_texts(seed, 40), random_texts(seed + 100, 30) + [""]
    for epoch, text in enumerate(texts):
        tree.insert(text, epoch)
        oracle.insert(text, epoch)
        for q in queries:
            assert tree.match(q) == oracle.match(q), \
                f"after inserting {texts[:epoch + 1]}: match({q!r}) (length, epoch) expected {oracle.match(q)}, " \
                f"got {tree.match(q)}"
        assert tree.size == oracle.size(), \
            f"after inserting {texts[:epoch + 1]}: {oracle.size()} characters stored expected, size says {tree.size}"


@pytest.mark.stubs("ApproxTree.insert", "ApproxTree.match")
def test_a_split_keeps_both_halves_and_the_older_epoch():
    """"hello" then "help": the node "hel" is split off; both words still match whole, "hel..." keeps epoch 0."""
    tree = ApproxTree()
    assert tree.match("hello") == (0, -1), f"an empty tree matches nothing: {tree.match('hello')}"
    tree.insert("hello", 0)
    tree.insert("help", 1)
    cases = {"hello world": (5, 0), "helpful": (4, 1), "helium": (3, 0), "hex": (2, 0), "x": (0, -1), "": (0, -1)}
    got = {q: tree.match(q) for q in cases}
    assert got == cases, f"matches after 'hello', 'help': expected {cases}, got {got}"
    tree.insert("hello", 2)  # again: nothing new is stored, the old epoch stays
    tree.insert("he", 3)  # a prefix of what is stored: a split at its end, nothing new
    assert tree.size == len("hel") + len("lo") + len("p"), f"'hel' + 'lo' + 'p' stored once each, size {tree.size}"
    assert tree.match("hello") == (5, 0) and tree.match("he") == (2, 0), \
        f"re-inserting keeps the first epoch: {tree.match('hello')}, {tree.match('he')}"


# --- the policy --------------------------------------------------------------------------------------------------

@pytest.mark.stubs("is_imbalanced")
def test_imbalance_needs_both_thresholds_strictly():
    """The router's definition: (max - min) > abs and max > min * rel, both strict."""
    c = CacheAwareConfig(balance_abs_threshold=4, balance_rel_threshold=1.5)
    cases = [([0, 0], False), ([5, 0], True), ([4, 0], False), ([12, 8], False), ([13, 8], True), ([3, 0, 9], True),
             ([20, 15], False), ([100, 96], False), ([9, 6], False), ([16, 10], True), ([1], False)]
    for loads, want in cases:
        assert is_imbalanced(loads, c) == want, \
            f"loads {loads} with abs 4, rel 1.5: imbalanced expected {want}, got {is_imbalanced(loads, c)}"
    assert not is_imbalanced([70, 10], CacheAwareConfig()), "defaults abs 64, rel 1.5: 70 vs 10 is a gap of 60"
    assert is_imbalanced([75, 10], CacheAwareConfig()), "defaults abs 64, rel 1.5: 75 vs 10 is imbalanced"


def run_trace(policy, oracle, trace: list[tuple[str, str | int]], what: str) -> None:
    """Steps ("send", text) and ("finish", k): the k-th request sent so far finishes."""
    sent = []
    for step, (kind, arg) in enumerate(trace):
        if kind == "finish":
            worker = sent[arg]
            policy.finish(worker)
            oracle.finish(worker)
            continue
        loads = list(oracle.loads)
        want, got = oracle.select(arg), policy.select(arg)
        assert got == want, (f"{what}, step {step}: loads {loads}, text {arg[:40]!r}... ({len(arg)} chars): worker "
                             f"{want} expected ({oracle.branches[-1]}), got {got}")
        sent.append(got)
        assert policy.loads == oracle.loads, f"{what}, step {step}: loads {oracle.loads} expected, got {policy.loads}"


def chat_trace(seed: int, finish_rate: float = 0.4, **workload) -> list[tuple[str, str | int]]:
    """The chat workload's turns in round order, with random finishes of requests in flight between them."""
    rng, trace, inflight, count = random.Random(seed), [], [], 0
    for turn in interleave(chat_workload(seed=seed, **workload)):
        trace.append(("send", turn.prompt))
        inflight.append(count)
        count += 1
        while inflight and rng.random() < finish_rate:
            trace.append(("finish", inflight.pop(rng.randrange(len(inflight)))))
    return trace


POLICY_CASES = {  # name -> (workers, config, workload)
    "defaults": (2, CacheAwareConfig(), dict(conversations=10, turns=3, system_prompts=2, system_words=40)),
    "tight balance": (3, CacheAwareConfig(balance_abs_threshold=1, balance_rel_threshold=1.5),
                      dict(conversations=12, turns=3, system_prompts=3, system_words=30)),
    "high threshold": (3, CacheAwareConfig(cache_threshold=0.8, balance_abs_threshold=2),
                       dict(conversations=12, turns=4, system_prompts=2, system_words=60)),
}


@pytest.mark.stubs("CacheAwarePolicy.select", "is_imbalanced", "ApproxTree.insert", "ApproxTree.match")
@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_the_policy_follows_the_routers_rules_on_chat_traces(case):
    n, config, workload = POLICY_CASES[case]
    for seed in range(3):
        oracle = PolicyOracle(n, config)
        run_trace(CacheAwarePolicy([f"w{i}" for i in range(n)], config), oracle,
                  chat_trace(seed, finish_rate=0.2 if case == "tight balance" else 0.5, **workload), f"{case}, seed {seed}")
    if case == "tight balance":
        assert {"imbalanced", "cache hit", "low match"} <= set(oracle.branches), \
            f"the fixture must reach every rule, reached {set(oracle.branches)}"


@pytest.mark.stubs("CacheAwarePolicy.select", "ApproxTree.insert", "ApproxTree.match")
def test_the_threshold_is_strict_ties_go_to_the_older_text_and_the_first_worker():
    """A match of exactly cache_threshold of the text is no hit; equal matches go to the worker that held the text
    first; equal loads to the first worker; an empty text matches nothing."""
    p = CacheAwarePolicy(["a", "b", "c"], CacheAwareConfig(cache_threshold=0.3, balance_abs_threshold=100))
    p.loads = [0, 5, 5]
    assert p.select("zzz") == 0, "no match anywhere: the least loaded worker"
    p.loads = [9, 0, 0]
    assert p.select("zzzqqqqqqq") == 1, "3 of 10 characters is not more than 0.3: the least loaded, not worker 0"
    p.loads = [0, 0, 0]
    assert p.select("zzzx") == 0, "3 of 4 characters match on workers 0 and 1; worker 0 held 'zzz' first"
    p.loads = [1, 0, 0]
    assert p.select("") == 1, "an empty text matches nothing: the least loaded, the first of equals"
    q = CacheAwarePolicy(["a", "b"], CacheAwareConfig(balance_abs_threshold=2))
    q.loads = [1, 0]
    assert q.select("abcdef") == 1, "nothing matches: the least loaded, worker 1"
    q.loads = [0, 5]
    assert q.select("abcxyz") == 0, "imbalanced: worker 0, the least loaded"
    q.loads = [0, 0]
    assert q.select("abcq") == 1, "3 of 4 characters on both workers: worker 1 held 'abc' first (not the lower index)"


@pytest.mark.stubs("CacheAwarePolicy.select", "is_imbalanced", "ApproxTree.insert", "ApproxTree.match")
def test_an_imbalanced_choice_still_teaches_the_tree():
    """The least loaded worker takes the request when loads are far apart, and its tree learns the text: the
    next request with that prefix goes there once loads are even."""
    p = CacheAwarePolicy(["a", "b"], CacheAwareConfig(balance_abs_threshold=2))
    p.select("shared system prompt, turn 1")
    p.loads = [5, 0]
    assert p.select("another system prompt entirely") == 1, "imbalanced: worker 1, the least loaded"
    p.loads = [0, 0]
    assert p.select("another system prompt entirely, turn 2") == 1, \
        "worker 1 learned the text while imbalanced: its match wins"
    assert p.loads == [0, 1], f"select counts the request it places: {p.loads}"
    p.finish(1)
    with pytest.raises(ValueError, match="no request in flight"):
        p.finish(1)


def test_round_robin_ignores_the_text():
    p = RoundRobinPolicy(["a", "b", "c"])
    assert [p.select("same text") for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_the_workload_extends_each_conversation_and_shares_system_prompts():
    workload = chat_workload(conversations=5, turns=3, system_prompts=2, seed=7)
    assert workload == chat_workload(conversations=5, turns=3, system_prompts=2, seed=7), "a seed repeats exactly"
    for conversation in workload:
        for before, after in itertools.pairwise(conversation):
            assert after.prompt.startswith(before.prompt) and len(after.prompt) > len(before.prompt), \
                f"conversation {after.conversation}: turn {after.turn} must extend turn {before.turn}"
        assert all(t.prompt.endswith("\nAssistant:") for t in conversation), "every prompt asks for the next answer"
    system = [c[0].prompt.split("\nUser:")[0] for c in workload]
    assert system[0] == system[2] == system[4] != system[1] == system[3], "conversation c uses system prompt c mod 2"
    order = interleave(workload)
    assert [(t.turn, t.conversation) for t in order] == sorted((t.turn, t.conversation) for t in order)


# --- the SGLang fields sglang-router adds --------------------------------------------------------------------------

# The bodies sglang-router 0.3.2 forwarded for `{"model", "messages" / "prompt", "max_tokens": 8, "temperature": 0}`,
# recorded from a worker that printed what it got.
ROUTER_CHAT_BODY = {"messages": [{"role": "user", "content": "hi"}], "model": NAME, "logprobs": False,
                    "max_completion_tokens": 8, "stream": False, "temperature": 0.0, "no_stop_trim": False,
                    "ignore_eos": False, "continue_final_message": False, "skip_special_tokens": True,
                    "separate_reasoning": True, "stream_reasoning": True, "return_hidden_states": False}
ROUTER_COMPLETION_BODY = {"model": NAME, "prompt": "hi", "max_tokens": 8, "temperature": 0.0, "stream": False,
                          "echo": False, "no_stop_trim": False, "ignore_eos": False, "skip_special_tokens": True,
                          "return_hidden_states": False}


def test_the_fields_the_router_adds_are_accepted_and_change_nothing():
    from minisgl.server.protocol import ChatCompletionRequest, CompletionRequest, to_tokenize_msg

    for cls, body in ((ChatCompletionRequest, ROUTER_CHAT_BODY), (CompletionRequest, ROUTER_COMPLETION_BODY)):
        plain = {k: v for k, v in body.items() if k in ("messages", "prompt", "model", "temperature", "stream")}
        plain["max_tokens"] = 8
        got, want = to_tokenize_msg(1, cls(**body)), to_tokenize_msg(1, cls(**plain))
        assert got == want, f"{cls.__name__}: the router's body must ask for what the plain one asks: {got} vs {want}"


@pytest.mark.parametrize("field,value", [("no_stop_trim", True), ("skip_special_tokens", False),
                                         ("return_hidden_states", True), ("continue_final_message", True)])
def test_a_field_asking_for_what_this_server_cannot_do_is_a_400_naming_it(field, value):
    from minisgl.server.errors import APIError
    from minisgl.server.protocol import ChatCompletionRequest, to_tokenize_msg

    with pytest.raises(APIError) as e:
        to_tokenize_msg(1, ChatCompletionRequest(**ROUTER_CHAT_BODY | {field: value}))
    assert e.value.status == 400 and e.value.param == field, f"{field}={value}: {e.value.status} {e.value.param}"


# --- the real router ---------------------------------------------------------------------------------------------

def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(urls: list[str], *flags: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([*ROUTER, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
                             "--prometheus-port", str(free_port()), "--log-level", "warn", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def router_workers(url: str, count: int, timeout: float = 60.0) -> list[dict]:
    """The router's workers once it has registered `count` healthy ones."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            workers = httpx.get(url + "/workers", timeout=5).json()["workers"]
            if len(workers) == count and all(w["is_healthy"] for w in workers):
                return workers
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the router at {url} did not register {count} healthy workers in {timeout:.0f} s")


class HeldWorkers:
    """HTTP workers in this process that answer the router's questions and record every completion request,
    answering it only when the test releases it: the test decides which requests are in flight."""

    def __init__(self, n: int, model: str = "fake") -> None:
        self.cond = threading.Condition()
        self.got: list[tuple[int, str, threading.Event]] = []  # (worker, prompt, release)
        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), self._handler(i, model)) for i in range(n)]
        for server in self.servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in self.servers]

    def _handler(self, index: int, model: str):
        workers = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def answer(self, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.answer({"served_model_name": model} if self.path.endswith("server_info") else {})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                release = threading.Event()
                with workers.cond:
                    workers.got.append((index, body["prompt"], release))
                    workers.cond.notify_all()
                release.wait(120)
                self.answer({"id": "x", "object": "text_completion", "created": 0, "model": model,
                             "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        return Handler

    def wait_for(self, count: int) -> tuple[int, str, threading.Event]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.got) >= count, 60), f"request {count - 1} reached no worker"
            return self.got[count - 1]

    def close(self) -> None:
        for s in self.got:
            s[2].set()
        for server in self.servers:
            server.shutdown()
            server.server_close()


def wait_for_loads(url: str, order: list[str], want: list[int]) -> None:
    """The router lowers a worker's load once it has passed the answer on: wait until its loads are `want`."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        loads = {w["url"]: w["load"] for w in httpx.get(url + "/workers", timeout=5).json()["workers"]}
        if [loads[u] for u in order] == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"the router's loads stay {loads}, expected {dict(zip(order, want))}")


@needs_router
@pytest.mark.stubs("CacheAwarePolicy.select", "is_imbalanced", "ApproxTree.insert", "ApproxTree.match")
def test_the_policy_makes_the_real_routers_choices_on_the_same_trace():
    """sglang-router (cache_aware, abs threshold 1 so that every rule is reached) in front of 3 held workers; the
    chat trace with random finishes; before each request the router's loads equal the model's."""
    config = CacheAwareConfig(cache_threshold=0.3, balance_abs_threshold=1, balance_rel_threshold=1.5)
    CacheAwarePolicy(["x"], config).select("x")  # on the skeleton, the stub fails here, before any process starts
    workers = HeldWorkers(3)
    proc, url = start_router(workers.urls, "--policy", "cache_aware", "--cache-threshold", "0.3",
                             "--balance-abs-threshold", "1", "--balance-rel-threshold", "1.5")
    clients = []
    try:
        order = [w["url"] for w in router_workers(url, 3)]  # the router's order: its first of equals
        policy, oracle = CacheAwarePolicy(order, config), PolicyOracle(3, config)
        probes = [("send", t) for t in ("aaa", "aaabbbbbbb", "aaabbbbbbb", "zzzz", "zzzzq", "", "aaabbbbbbbc")]
        trace = probes + chat_trace(5, finish_rate=0.5, conversations=9, turns=3, system_prompts=3, system_words=30)
        for step, (kind, arg) in enumerate(trace):
            if kind == "finish":
                worker, _, release = workers.got[arg]
                release.set()
                clients[arg].join()
                policy.finish(order.index(workers.urls[worker]))
                oracle.finish(order.index(workers.urls[worker]))
                wait_for_loads(url, order, policy.loads)
                continue
            body = {"model": "fake", "prompt": arg, "max_tokens": 1}
            clients.append(threading.Thread(target=httpx.post, args=(url + "/v1/completions",),
                                            kwargs={"json": body, "timeout": 120}))
            clients[-1].start()
            worker, prompt, _ = workers.wait_for(len(clients))
            assert prompt == arg, f"step {step}: the router forwarded {prompt!r}, sent {arg!r}"
            got = order.index(workers.urls[worker])
            loads = list(policy.loads)
            want = policy.select(arg)
            oracle.select(arg)
            assert got == want, (f"step {step}: loads {loads}, text {arg[:40]!r}: the router chose worker {got}, "
                                 f"the policy {want} (the documented rules say {oracle.branches[-1]})")
        assert {"imbalanced", "cache hit", "low match"} <= set(oracle.branches), \
            f"the trace must reach every rule, reached {set(oracle.branches)}"
    finally:
        workers.close()
        for c in clients:
            c.join(30)
        proc.terminate()
        proc.wait(30)


class Launcher:
    """`python -m minisgl.router --dp N` (chapter 27's launcher) on a free port, stopped by SIGTERM (as Ctrl-C)."""

    SERVING = re.compile(r"serving .* on (http://\S+) through sglang-router")

    def __init__(self, *args: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "minisgl.router", "--port", "0", "--router",
                                      " ".join(ROUTER), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if m := self.SERVING.search(line):
                self.url = m.group(1)
                threading.Thread(target=self._drain, daemon=True).start()
                return
        raise AssertionError(f"the launcher exited with {self.proc.wait()}: " + "\n".join(self.lines[-20:]))

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


@pytest.fixture(scope="module")
def dp():
    if not ROUTER_PYTHON.exists():
        pytest.skip("sglang-router is not installed: `make router` puts it in build/sglang-router")
    import psutil

    from minisgl.server.local import running

    launcher = Launcher("--dp", "2", "--model", str(model_path(NAME)), "--max-seq-len", "256", "--cpu-kv-cache-mb", "8")
    children = psutil.Process(launcher.proc.pid).children(recursive=True)
    yield launcher
    try:
        code = launcher.stop()
    finally:  # whatever happened, nothing of it outlives the test
        left = [c for c in children if running(c)]
        for process in left:
            process.kill()
        if launcher.proc.poll() is None:
            launcher.proc.kill()
    assert code == 0 and not left, \
        f"the launcher exited with {code}, left {[c.pid for c in left]} running: {launcher.lines[-10:]}"


@needs_router
def test_the_router_registers_both_servers_under_their_model_name(dp):
    """Through /server_info (served_model_name) and /model_info (type, architectures) each server is filed under
    its model; /v1/models through the router names it."""
    workers = router_workers(dp.url, 2)
    assert all(w["model_id"] == NAME for w in workers), f"each worker's model: {[w['model_id'] for w in workers]}"
    meta = workers[0]["metadata"]
    assert meta.get("model_type") == "qwen3" and "Qwen3ForCausalLM" in meta.get("architectures", ""), meta
    models = httpx.get(dp.url + "/v1/models", timeout=30).json()
    assert [m["id"] for m in models["data"]] == [NAME], f"/v1/models through the router: {models}"
    info = httpx.get(workers[0]["url"] + "/server_info", timeout=30).json()
    assert info["served_model_name"] == NAME and info["max_total_num_tokens"] > 0, info
    assert httpx.get(workers[0]["url"] + "/get_model_info", timeout=30).json()["architectures"] == ["Qwen3ForCausalLM"]


@needs_router
def test_answers_through_the_router_equal_hf_greedy(dp):
    """Chat (the router renames max_tokens and adds its fields; a chat that names no model reaches the server as
    model "unknown") and completions through the router: Hugging Face greedy, token for token."""
    from openai import OpenAI

    tok = tokenizer(NAME)
    client = OpenAI(base_url=dp.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    for i, question in enumerate(CHAT[:2]):
        messages = [{"role": "user", "content": question}]
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        want = tok.decode(hf_greedy(NAME, list(ids), 10, stop_at_eos=True), skip_special_tokens=True)
        if i == 0:
            got = client.chat.completions.create(model=NAME, messages=messages, max_tokens=10,
                                                 temperature=0).choices[0].message.content
        else:
            r = httpx.post(dp.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 10,
                                                                   "temperature": 0}, timeout=300)
            assert r.status_code == 200, f"a chat without a model: {r.status_code} {r.text}"
            got = r.json()["choices"][0]["message"]["content"]
        assert got == want, f"chat {question!r}{'' if i == 0 else ' (no model)'}: {got!r} vs {want!r}"
    for i, text in enumerate(TEXTS[:3]):
        want = tok.decode(hf_greedy(NAME, tok.encode(text), 8, stop_at_eos=True), skip_special_tokens=True)
        r = client.completions.create(model=NAME, prompt=text, max_tokens=8, temperature=0)
        assert r.choices[0].text == want, f"prompt {i}: {r.choices[0].text!r} vs {want!r}"
