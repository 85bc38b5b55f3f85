"""The server's command line: `python -m minisgl.server --model PATH [--port 8000] [--api-key KEY] ...`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from minisgl.scheduler.config import SchedulerConfig


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
    a = p.parse_args(argv)
    engine_keys = ("device", "dtype", "max_running_reqs", "max_seq_len", "page_size", "num_pages", "cpu_kv_cache_mb",
                   "attention_backend", "cuda_graph_max_bs")
    engine = {k: getattr(a, k) for k in engine_keys if getattr(a, k) is not None}
    scheduler = {"max_extend_tokens": a.max_extend_tokens} if a.max_extend_tokens is not None else {}
    if a.no_overlap:
        scheduler["overlap"] = False
    try:
        return ServerArgs(a.model, a.host, a.port, a.served_model_name, a.api_key, engine, SchedulerConfig(**scheduler),
                          a.log_requests, a.stream_interval)
    except ValueError as e:
        p.error(str(e))
