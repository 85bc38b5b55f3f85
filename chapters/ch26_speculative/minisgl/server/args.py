"""The server's command line: `python -m minisgl.server --model PATH [--port 8000] [--api-key KEY] ...`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from minisgl.scheduler.config import SchedulerConfig
from minisgl.spec.config import METHODS, SpecConfig


@dataclass
class ServerArgs:
    model_path: str
    host: str = "127.0.0.1"  # this machine only, unless asked otherwise
    port: int = 8000
    served_model_name: str = ""  # the `model` clients name; default: the model folder's name
    api_key: str | None = None  # when set, /v1/* and every POST need "Authorization: Bearer <key>"
    engine_args: dict = field(default_factory=dict)  # EngineConfig keywords
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)  # the scheduler's settings
    log_requests: bool = False  # one line per finished request (tokens, finish reason, TTFT, time per token)
    stream_interval: int = 1  # a streamed request gets an event every this many tokens (SGLang's --stream-interval)

    def __post_init__(self) -> None:
        if self.stream_interval < 1:
            raise ValueError(f"--stream-interval must be >= 1, got {self.stream_interval}")
        if not self.served_model_name:
            self.served_model_name = Path(self.model_path).name

    @property
    def scheduler_args(self) -> SchedulerConfig:
        """The scheduler's settings under the name the API server hands them to its workers by."""
        return self.scheduler_config


def parse_args(argv: list[str] | None = None) -> ServerArgs:
    p = argparse.ArgumentParser(prog="python -m minisgl.server", description="an OpenAI-compatible server")
    p.add_argument("--model", required=True, help="a model folder (config.json, safetensors, tokenizer)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: a free port the system picks (the server prints it)")
    p.add_argument("--served-model-name", default="")
    p.add_argument("--api-key", default=None, help="required on /v1/* and on every POST (/abort_request)")
    p.add_argument("--log-requests", action="store_true", help="print one line per finished request")
    p.add_argument("--stream-interval", type=int, default=1, help="a streamed request gets an event every this many "
                   "tokens, with the text of all of them (default 1: every token)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when there is one)")
    p.add_argument("--dtype", default=None)
    p.add_argument("--max-running-reqs", type=int, default=None)
    p.add_argument("--max-seq-len", type=int, default=None)
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--num-pages", type=int, default=None, help="KV pool size in pages (default: from memory)")
    p.add_argument("--cpu-kv-cache-mb", type=int, default=None)
    p.add_argument("--attention-backend", default=None, help="auto, torch, triton or fa (chapter 17 on)")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None, help="chapter 18 on")
    p.add_argument("--max-extend-tokens", type=int, default=None, help="prefill token budget of one batch")
    p.add_argument("--no-overlap", action="store_true", help="turn overlap scheduling off")
    p.add_argument("--admission", choices=("conservative", "optimistic"), default=None,
                   help="chapter 23: reserve all of max_tokens (conservative, the default) or an estimate, "
                        "retracting requests when the KV pool runs dry (optimistic)")
    p.add_argument("--retraction-policy", choices=("length", "last"), default=None,
                   help="chapter 23: which running request optimistic admission retracts first")
    p.add_argument("--max-retractions", type=int, default=None,
                   help="chapter 23: times a request may be retracted before it is pinned (default 1)")
    # Chapter 26, SGLang's flag names (its NGRAM and STANDALONE algorithms are our ngram and draft).
    p.add_argument("--speculative-algorithm", type=str.lower, choices=METHODS, default=None,
                   help="chapter 26: speculative decoding by n-gram lookup in each request's own tokens, or by a "
                        "draft model (--speculative-draft-model-path); default: off")
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None,
                   help="chapter 26: draft tokens per request and step (default 4; SGLang counts one more)")
    p.add_argument("--speculative-draft-model-path", default=None,
                   help="chapter 26: the draft model's folder (same vocabulary as --model)")
    p.add_argument("--speculative-ngram-min-match-window-size", type=int, default=None,
                   help="chapter 26: the shortest suffix n-gram lookup tries (default 1)")
    p.add_argument("--speculative-ngram-max-match-window-size", type=int, default=None,
                   help="chapter 26: the longest suffix n-gram lookup tries, first (default 3)")
    p.add_argument("--speculative-backoff", type=on_off, default=None, metavar="{on,off}",
                   help="chapter 26: steps that gain nothing make the next few plain decode steps (default on)")
    a = p.parse_args(argv)
    if a.max_retractions is not None and a.max_retractions < 1:
        p.error(f"--max-retractions must be >= 1, got {a.max_retractions}")
    engine_keys = ("device", "dtype", "max_running_reqs", "max_seq_len", "page_size", "num_pages", "cpu_kv_cache_mb",
                   "attention_backend", "cuda_graph_max_bs")
    engine = {k: getattr(a, k) for k in engine_keys if getattr(a, k) is not None}
    scheduler = {"max_extend_tokens": a.max_extend_tokens} if a.max_extend_tokens is not None else {}
    if a.no_overlap:
        scheduler["overlap"] = False
    for key in ("admission", "retraction_policy", "max_retractions"):
        if getattr(a, key) is not None:
            scheduler[key] = getattr(a, key)
    try:
        speculative = spec_config(a)
    except ValueError as e:
        p.error(str(e))
    if speculative is not None:
        scheduler["speculative"] = speculative
    try:
        return ServerArgs(a.model, a.host, a.port, a.served_model_name, a.api_key, engine, SchedulerConfig(**scheduler),
                          a.log_requests, a.stream_interval)
    except ValueError as e:
        p.error(str(e))


SPEC_FLAGS = {"num_tokens": "--speculative-num-draft-tokens", "draft_model_path": "--speculative-draft-model-path",
              "min_n": "--speculative-ngram-min-match-window-size", "max_n": "--speculative-ngram-max-match-window-size",
              "backoff": "--speculative-backoff"}


def on_off(value: str) -> bool:
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")
    return value == "on"


def spec_config(a: argparse.Namespace) -> SpecConfig | None:
    """Chapter 26: the SpecConfig the --speculative-* flags ask for (None without --speculative-algorithm); a
    ValueError naming the flag for a combination that cannot run, at start-up rather than in the scheduler."""
    given = {key: getattr(a, flag[2:].replace("-", "_")) for key, flag in SPEC_FLAGS.items()}
    given = {key: value for key, value in given.items() if value is not None}
    if a.speculative_algorithm is None:
        if given:
            raise ValueError(f"{', '.join(SPEC_FLAGS[key] for key in given)} needs --speculative-algorithm")
        return None
    try:
        return SpecConfig(a.speculative_algorithm, **given)
    except ValueError as e:  # SpecConfig names its fields; the command line knows them as flags
        message = str(e)
        for key, flag in SPEC_FLAGS.items():
            message = message.replace(f"SpecConfig.{key}", flag)
        raise ValueError(message.replace("method", "--speculative-algorithm")) from None
