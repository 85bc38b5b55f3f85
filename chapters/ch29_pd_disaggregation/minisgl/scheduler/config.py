"""SchedulerConfig: the scheduler's settings, checked once, when they are made.

LLM builds one from the keyword arguments that name its fields, the server from its flags; either passes it whole
to the scheduler. A bad value is a ValueError naming the field, before any engine is built. Later chapters add
fields here (overlap scheduling, mixed batches, admission, speculation); a field that is None takes its default
from the environment (MINISGL_*) when the config is made.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from minisgl.env import ENV
from minisgl.scheduler.retract import RETRACTION_POLICIES, NewTokenRatio
from minisgl.spec.config import SpecConfig

ADMISSIONS = ("conservative", "optimistic")
# Chapter 28, SGLang's names (SGLang also has write_through_selective: back up only prefixes hit often enough)
HICACHE_WRITE_POLICIES = ("write_through", "write_back")
DISAGGREGATION_MODES = ("null", "prefill", "decode")  # chapter 29, SGLang's names ("null": one engine does both)
TRANSFER_BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class SchedulerConfig:
    max_extend_tokens: int = 8192  # the prefill token budget of one batch: prompt tokens computed in one pass
    overlap: bool | None = None  # overlap scheduling; None: on unless MINISGL_DISABLE_OVERLAP_SCHEDULING is set
    # Chapter 21: running requests decode in the pass of a prefill batch; None: MINISGL_ENABLE_MIXED_CHUNK, else off
    enable_mixed_chunk: bool | None = None
    # Chapter 23: "conservative" reserves all that running requests may still write, "optimistic" an estimate (the
    # new-token ratio) and retracts when the pool runs dry; None: MINISGL_ADMISSION, else conservative.
    admission: str | None = None
    new_token_ratio: NewTokenRatio | None = None  # None: a NewTokenRatio from MINISGL_INIT_NEW_TOKEN_RATIO
    retraction_policy: str = "length"  # which running request is retracted first: "length" or "last"
    max_retractions: int = 1  # retractions of one request before it is pinned (never retracted again)
    speculative: SpecConfig | None = None  # chapter 26: speculative decoding; None speculates not
    # Chapter 28: a host tier under the radix cache. Its size is hicache_ratio times the device pool's, or hicache_size
    # GB when that is not 0; write_through backs a prefix up when it is cached, write_back when it is evicted.
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0  # SGLang's default
    hicache_size: int = 0
    hicache_write_policy: str = "write_through"
    # Chapter 29: prefill/decode disaggregation. A prefill server listens for its decode server on the bootstrap
    # port (a TCPStore); the decode server connects to bootstrap_host:bootstrap_port. The KV goes over gloo (CPU
    # tensors) or NCCL (one GPU per server); auto: NCCL on a GPU, gloo on the CPU.
    disaggregation_mode: str = "null"
    disaggregation_bootstrap_host: str = "127.0.0.1"
    disaggregation_bootstrap_port: int = 8998  # SGLang's default
    disaggregation_transfer_backend: str = "auto"

    def __post_init__(self) -> None:
        check_int("max_extend_tokens", self.max_extend_tokens, minimum=1)
        self._default("overlap", not ENV.DISABLE_OVERLAP_SCHEDULING)
        self._default("enable_mixed_chunk", ENV.ENABLE_MIXED_CHUNK)
        if self.admission is None:
            object.__setattr__(self, "admission", ENV.ADMISSION)
        check_choice("admission", self.admission, ADMISSIONS)
        check_choice("retraction_policy", self.retraction_policy, RETRACTION_POLICIES)
        check_int("max_retractions", self.max_retractions, minimum=1)
        if self.new_token_ratio is not None and not isinstance(self.new_token_ratio, NewTokenRatio):
            raise ValueError(f"new_token_ratio must be a NewTokenRatio, got {type(self.new_token_ratio).__name__}")
        if self.speculative is not None and not isinstance(self.speculative, SpecConfig):
            raise ValueError(f"speculative must be a SpecConfig or None, got {type(self.speculative).__name__}")
        self._check_hicache()
        check_choice("disaggregation_mode", self.disaggregation_mode, DISAGGREGATION_MODES)
        check_choice("disaggregation_transfer_backend", self.disaggregation_transfer_backend, TRANSFER_BACKENDS)
        check_int("disaggregation_bootstrap_port", self.disaggregation_bootstrap_port, minimum=1)
        if self.disaggregation_bootstrap_port > 65535:
            raise ValueError(f"disaggregation_bootstrap_port must be <= 65535, got {self.disaggregation_bootstrap_port}")
        if self.disaggregation_mode != "null" and self.speculative is not None:
            raise ValueError("speculative decoding is not supported with disaggregation_mode (chapter 29)")
        if self.disaggregation_mode != "null" and self.enable_hierarchical_cache:
            raise ValueError("enable_hierarchical_cache is not supported with disaggregation_mode (chapter 29)")

    def _check_hicache(self) -> None:
        if not isinstance(self.enable_hierarchical_cache, bool):
            raise ValueError(f"enable_hierarchical_cache must be True or False, got {self.enable_hierarchical_cache!r}")
        ratio = self.hicache_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not ratio > 0:
            raise ValueError(f"hicache_ratio must be a number > 0, got {ratio!r}")
        check_int("hicache_size", self.hicache_size, minimum=0)
        if self.hicache_write_policy == "write_through_selective":
            raise ValueError("hicache_write_policy write_through_selective (SGLang's) is not built here: use "
                             "write_through or write_back")
        check_choice("hicache_write_policy", self.hicache_write_policy, HICACHE_WRITE_POLICIES)

    @property
    def optimistic(self) -> bool:
        return self.admission == "optimistic"

    def _default(self, name: str, value: bool) -> None:
        """A bool field: None takes `value` (the environment's); anything else must be a bool."""
        given = getattr(self, name)
        if given is None:
            object.__setattr__(self, name, value)  # frozen: only __post_init__ fills a default in
        elif not isinstance(given, bool):
            raise ValueError(f"{name} must be True, False or None, got {given!r}")


def check_int(name: str, value: object, minimum: int) -> None:
    """ValueError naming the field unless `value` is an integer >= minimum (a bool is not an integer here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
