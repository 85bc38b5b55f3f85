"""Prefill/decode disaggregation (chapter 29): a prefill engine computes each prompt's KV and first token and sends the
KV to a decode engine, which receives it into pages of its own and generates the rest. The channel between them is
torch.distributed's (a TCPStore to meet and to post what is coming, gloo or NCCL send/recv for the KV)."""

from minisgl.disagg.channel import KVChannel
from minisgl.disagg.decode import DecodeScheduler
from minisgl.disagg.kv import kv_shape, pack_kv, unpack_kv
from minisgl.disagg.prefill import PrefillScheduler

__all__ = ["DecodeScheduler", "KVChannel", "PrefillScheduler", "kv_shape", "pack_kv", "unpack_kv"]
