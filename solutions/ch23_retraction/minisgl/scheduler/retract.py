"""Optimistic admission and retraction (chapter 23): admit on an estimate of what the running requests will still
write, and take requests back out when a decode step finds the estimate was too low.

Conservative admission (chapters 7-22) reserves for every running request all the KV it may still write, as if
each one would run to max_tokens. Chat traffic rarely does: EOS or a stop string ends most answers long before
that, so most of the reservation is never used and requests wait for room they would not have needed. Optimistic
admission counts a running request for a share `NewTokenRatio.current` of what it may still write. The share
starts high, falls a little at every decode step (the estimate grows bolder while the pool holds), and goes back
up after a retraction, the moment the pool ran dry because it was too bold.

When a decode step cannot get its pages, the scheduler retracts running requests (`pick_victim` says which):
their computed prefix goes to the prefix cache, the rest of their pages is freed, and they wait at the front of
the queue with every token generated so far, to be prefilled again (recomputed) when there is room. A request
retracted `max_retractions` times is pinned: it is never retracted again, and its whole remaining need stays
reserved, so it runs to its end.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from minisgl.core import Req

# After a retraction the ratio is at least what the running requests have generated so far, plus this many
# tokens each, over their max_tokens (SGLang's SGLANG_RETRACT_DECODE_STEPS).
RETRACT_DECODE_STEPS = 20
RETRACTION_POLICIES = ("length", "last")


class NewTokenRatio:
    """The share of the KV a running request may still write that admission expects it to write.

    Starts at `init`, falls by (init - min_ratio) / decay_steps at every decode step that gets its pages, never
    below min_ratio; after a retraction it rises to at least `init` (see after_retraction); reset() when the
    scheduler is idle. SGLang's defaults: init 0.7, min 0.14 x init, 600 decay steps."""

    def __init__(self, init: float = 0.7, min_ratio: float | None = None, decay_steps: int = 600) -> None:
        if isinstance(init, bool) or not isinstance(init, (int, float)) or not 0 < init <= 1:
            raise ValueError(f"init must be in (0, 1], got {init!r}")
        min_ratio = init * 0.14 if min_ratio is None else min_ratio
        if isinstance(min_ratio, bool) or not isinstance(min_ratio, (int, float)) or not 0 < min_ratio <= init:
            raise ValueError(f"min_ratio must be in (0, init={init}], got {min_ratio!r}")
        if isinstance(decay_steps, bool) or not isinstance(decay_steps, int) or decay_steps < 1:
            raise ValueError(f"decay_steps must be an integer >= 1, got {decay_steps!r}")
        self.init, self.min = float(init), float(min_ratio)
        self.decay = (self.init - self.min) / decay_steps
        self.current = self.init

    def step(self) -> None:
        """A decode step got its pages: the estimate may grow a little bolder."""
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        self.current = self.init

    def after_retraction(self, running: Sequence[Req]) -> None:
        """The pool ran dry: the estimate was too low. It becomes what the requests still running have really
        generated, plus RETRACT_DECODE_STEPS tokens each, over what they may generate in all (the max_tokens each
        was sent with), and never less than `init`, nor more than 1."""
        # TODO(ch23): generated = the sum over `running` of device_len - prompt_len (tokens generated, counted on
        # the device: a token still in flight counts); budget = the sum of sampling_params.max_tokens, the whole
        # budget each request was sent with (not output_len: for a request admitted again after a retraction that is
        # only what was left of its budget then). observed = (generated + RETRACT_DECODE_STEPS * len(running)) /
        # (budget + 1) (the + 1: an empty list divides by 1); current = observed, at least init and at most 1.
        # >>> solution
        generated = sum(r.device_len - r.prompt_len for r in running)
        budget = sum(r.sampling_params.max_tokens for r in running)
        observed = (generated + RETRACT_DECODE_STEPS * len(running)) / (budget + 1)
        self.current = min(1.0, max(self.init, observed))
        # <<< solution

    def __repr__(self) -> str:
        return f"NewTokenRatio(current={self.current:.4f}, init={self.init}, min={self.min:.4f})"


def pick_victim(reqs: Sequence[Req], policy: str = "length", pinned: Collection[int] = ()) -> Req | None:
    """Which of `reqs` (in admission order) to retract next; None if every one is pinned.

    "length" (SGLang's default): the fewest tokens generated, then the longest prompt; it loses the least decoding
    work, and frees the most pages for it. "last" (vLLM's and nano-vllm's rule): the most recently admitted, so the
    oldest requests keep going, first come first served. Ties go to the most recently admitted."""
    if policy not in RETRACTION_POLICIES:
        raise ValueError(f"retraction policy must be one of {', '.join(RETRACTION_POLICIES)}, got {policy!r}")
    # TODO(ch23): leave out the pinned requests (their uid is in `pinned`); "length": the one with the fewest
    # generated tokens (device_len - prompt_len), among those the longest prompt, among those the latest in reqs;
    # "last": the latest in reqs.
    # >>> solution
    candidates = [(i, r) for i, r in enumerate(reqs) if r.uid not in pinned]
    if not candidates:
        return None
    if policy == "last":
        return candidates[-1][1]
    return min(candidates, key=lambda c: (c[1].device_len - c[1].prompt_len, -c[1].prompt_len, -c[0]))[1]
    # <<< solution
