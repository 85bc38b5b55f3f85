"""Data-parallel serving (chapter 27): a model of sglang-router's cache-aware policy, the workload it is measured
on, and the launcher of N servers behind the router (python -m minisgl.router)."""

from minisgl.router.approx_tree import ApproxTree, common_prefix
from minisgl.router.policy import CacheAwareConfig, CacheAwarePolicy, RoundRobinPolicy, is_imbalanced
from minisgl.router.workload import Turn, chat_workload, interleave

__all__ = ["ApproxTree", "CacheAwareConfig", "CacheAwarePolicy", "RoundRobinPolicy", "Turn", "chat_workload",
           "common_prefix", "interleave", "is_imbalanced"]
