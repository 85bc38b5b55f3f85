"""Tensor parallelism: which rank this process is, how heads split across ranks, and the collectives."""

from minisgl.distributed.comm import (all_gather_last_dim, all_reduce, broadcast_object, destroy_process_groups,
                                      gather_objects, init_process_groups, min_across_ranks,
                                      rendezvous_store)
from minisgl.distributed.info import DistributedInfo, get_tp_info, kv_head_of_rank, set_tp_info, split_heads

__all__ = ["DistributedInfo", "all_gather_last_dim", "all_reduce", "broadcast_object", "destroy_process_groups",
           "gather_objects", "get_tp_info", "init_process_groups", "kv_head_of_rank", "min_across_ranks",
           "rendezvous_store", "set_tp_info", "split_heads"]
