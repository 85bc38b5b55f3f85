"""Log-probabilities in the scheduler (chapter 24): from the sampler to the request's owner.

The engine leaves the log-probabilities of a batch's sampled tokens on the batch (BatchLogprobs, for the requests
that asked). They travel to the CPU with the tokens (the same kind of copy, before the same ready event), and when
the tokens are recorded each request's entry joins its list here, kept by uid: a retracted request (chapter 23)
comes back as a new Req but keeps the entries of the tokens it generated before. When the request finishes its
list goes with it (Req.logprobs); when it is aborted the list is dropped.
"""

from __future__ import annotations

import torch

from minisgl.core import BatchLogprobs, Logprobs, Req, TokenLogprob
from minisgl.scheduler.utils import PendingReq


class LogprobStore:
    """uid -> one TokenLogprob per output token so far, for the running (or waiting, retracted) requests that
    asked for log-probabilities."""

    def __init__(self) -> None:
        self.entries: dict[int, list[TokenLogprob]] = {}

    def add(self, pending: PendingReq) -> None:
        if pending.sampling_params.logprobs:
            self.entries[pending.uid] = []

    def record(self, req: Req, entries: dict[Req, TokenLogprob]) -> None:
        """The request's token of this step was just recorded: its entry (if it asked) joins its list."""
        entry = entries.get(req)
        if entry is not None and req.uid in self.entries:
            self.entries[req.uid].append(entry)

    def latest(self, uid: int) -> TokenLogprob | None:
        """The entry of the request's newest token, if it asked (what a token's message carries)."""
        entries = self.entries.get(uid)
        return entries[-1] if entries else None

    def take(self, uid: int) -> list[TokenLogprob] | None:
        """The request's entries, which are no longer kept here (None if it did not ask)."""
        return self.entries.pop(uid, None)

    # What every Stage 5 feature of the scheduler offers it (see Scheduler.features).
    def forget(self, uid: int) -> None:
        self.entries.pop(uid, None)

    def clear(self) -> None:
        self.entries.clear()

    def status(self) -> dict[str, int]:
        return {}


def to_host(logprobs: BatchLogprobs) -> BatchLogprobs:
    """Copies into pinned CPU memory, queued on the current stream: valid once an event recorded after them fired."""

    def copy(t: torch.Tensor) -> torch.Tensor:
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t, non_blocking=True)
        return host

    lp = logprobs.values
    return BatchLogprobs(logprobs.reqs, Logprobs(copy(lp.chosen), copy(lp.top_ids), copy(lp.top_values)))


def logprob_entries(logprobs: BatchLogprobs | None) -> dict[Req, TokenLogprob]:
    """Request -> the entry of its token, from a batch's BatchLogprobs on the CPU; each request keeps as many
    alternatives as it asked for."""
    if logprobs is None:
        return {}
    lp = logprobs.values
    chosen, ids, values = lp.chosen.tolist(), lp.top_ids.tolist(), lp.top_values.tolist()
    out = {}
    for i, req in enumerate(logprobs.reqs):
        k = req.sampling_params.top_logprobs
        out[req] = TokenLogprob(chosen[i], list(zip(ids[i][:k], values[i][:k])))
    return out
