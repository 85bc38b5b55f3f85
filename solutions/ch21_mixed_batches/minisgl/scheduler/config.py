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


@dataclass(frozen=True)
class SchedulerConfig:
    max_extend_tokens: int = 8192  # the prefill token budget of one batch: prompt tokens computed in one pass
    overlap: bool | None = None  # overlap scheduling; None: on unless MINISGL_DISABLE_OVERLAP_SCHEDULING is set
    # Chapter 21: running requests decode in the pass of a prefill batch; None: MINISGL_ENABLE_MIXED_CHUNK, else off
    enable_mixed_chunk: bool | None = None

    def __post_init__(self) -> None:
        check_int("max_extend_tokens", self.max_extend_tokens, minimum=1)
        self._default("overlap", not ENV.DISABLE_OVERLAP_SCHEDULING)
        self._default("enable_mixed_chunk", ENV.ENABLE_MIXED_CHUNK)

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
