"""Which worker gets a request (chapter 27): sglang-router's cache-aware policy, as a small model, and round robin.

Cache-aware routing sends a request where its prompt is probably cached, unless the workers' loads have drifted
too far apart; then it sends it to the least loaded worker. The rules, with the router's flags and defaults:

- load: the requests a worker is serving (sent, not finished yet).
- imbalanced: max_load - min_load > balance_abs_threshold (--balance-abs-threshold, 64) and max_load >
  min_load * balance_rel_threshold (--balance-rel-threshold, 1.5). Then the least loaded worker takes the request.
- balanced: the worker whose tree matches the request's text furthest takes it if that match is more than
  cache_threshold (--cache-threshold, 0.3) of the text; otherwise the least loaded worker does (a new prefix goes
  where there is most room to work).
- either way the request's text goes into the chosen worker's tree, and its load grows by one until it finishes.

Ties go as in the router: the least loaded worker is the first in the router's worker order; among workers whose
trees match equally far, the one that reached that text first (the smallest epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.router.approx_tree import ApproxTree


@dataclass(frozen=True)
class CacheAwareConfig:
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1.0:
            raise ValueError(f"balance thresholds must be abs >= 0 and rel >= 1, got {self.balance_abs_threshold} "
                             f"and {self.balance_rel_threshold}")


def is_imbalanced(loads: list[int], config: CacheAwareConfig) -> bool:
    """Whether the loads are far enough apart that the least loaded worker takes the next request."""
    # TODO(ch27): both of the router's conditions on the largest and smallest load: their difference above
    # balance_abs_threshold, and the largest above the smallest times balance_rel_threshold.
    # >>> solution
    high, low = max(loads), min(loads)
    return high - low > config.balance_abs_threshold and high > low * config.balance_rel_threshold
    # <<< solution


class CacheAwarePolicy:
    """The router's choice for each request, over `workers` in the router's order. `loads[i]` is worker i's
    requests in flight: select() counts the request it places, finish() takes it off."""

    def __init__(self, workers: list[str], config: CacheAwareConfig | None = None) -> None:
        if not workers:
            raise ValueError("the policy needs at least one worker")
        self.workers = list(workers)
        self.config = config or CacheAwareConfig()
        self.trees = [ApproxTree() for _ in workers]
        self.loads = [0] * len(workers)
        self.epoch = 0  # insertions so far: the age of every part of every tree

    def least_loaded(self) -> int:
        return min(range(len(self.workers)), key=lambda i: self.loads[i])  # the first of equals

    def select(self, text: str) -> int:
        """The worker that takes a request with this text (its index); the text goes into that worker's tree."""
        # TODO(ch27): imbalanced loads -> the least loaded worker. Else match `text` in every tree; the worker
        # with the longest match (ties: the smallest epoch) takes it if longest / len(text) > cache_threshold
        # (an empty text matches 0), else the least loaded one. Then insert the text into the chosen tree with
        # self.epoch, advance self.epoch by one, add one to the chosen worker's load, return its index.
        # >>> solution
        config = self.config
        if is_imbalanced(self.loads, config):
            chosen = self.least_loaded()
        else:
            matches = [tree.match(text) for tree in self.trees]
            best = min(range(len(matches)), key=lambda i: (-matches[i][0], matches[i][1]))
            rate = matches[best][0] / len(text) if text else 0.0
            chosen = best if rate > config.cache_threshold else self.least_loaded()
        self.trees[chosen].insert(text, self.epoch)
        self.epoch += 1
        self.loads[chosen] += 1
        return chosen
        # <<< solution

    def finish(self, worker: int) -> None:
        """Worker `worker` answered one of its requests."""
        if self.loads[worker] == 0:
            raise ValueError(f"worker {worker} ({self.workers[worker]}) has no request in flight")
        self.loads[worker] -= 1


class RoundRobinPolicy:
    """The baseline: request i goes to worker i mod N, whatever its text."""

    def __init__(self, workers: list[str]) -> None:
        if not workers:
            raise ValueError("the policy needs at least one worker")
        self.workers = list(workers)
        self.next = 0

    def select(self, text: str) -> int:
        chosen, self.next = self.next, (self.next + 1) % len(self.workers)
        return chosen

    def finish(self, worker: int) -> None:
        pass
