"""Which rank this process is, and how attention heads are shared out among the ranks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DistributedInfo:
    rank: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} of {self.size}: need size >= 1 and 0 <= rank < size")

    @property
    def is_primary(self) -> bool:
        """Rank 0 schedules, talks to the caller and returns results."""
        return self.rank == 0


_TP_INFO = DistributedInfo(0, 1)  # a process that never joined a group is the only rank


def set_tp_info(info: DistributedInfo) -> None:
    global _TP_INFO
    _TP_INFO = info


def get_tp_info() -> DistributedInfo:
    return _TP_INFO


def split_heads(num_qo_heads: int, num_kv_heads: int, tp_size: int) -> tuple[int, int]:
    """(query heads, KV heads) each rank holds. ValueError when the heads cannot be shared out evenly.

    Query heads are split evenly. KV heads too when there are at least tp_size of them; with fewer, each KV
    head is replicated on tp_size // num_kv_heads consecutive ranks (as SGLang does), so every rank holds one.
    """
    if tp_size < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    if tp_size == 1:
        return num_qo_heads, num_kv_heads
    # TODO(ch16): refuse query heads that tp_size does not divide; with at least tp_size KV heads, tp_size
    # must divide them too; with fewer, they must divide tp_size (each rank then holds one copy of one).
    raise NotImplementedError("TODO(ch16): split_heads")


def kv_head_of_rank(num_kv_heads: int, rank: int, tp_size: int) -> int:
    """The first KV head rank `rank` holds (its only one when heads are replicated)."""
    if num_kv_heads >= tp_size:
        return rank * (num_kv_heads // tp_size)
    return rank // (tp_size // num_kv_heads)
