"""SchedulerConfig: the scheduler's settings, checked once, when they are made.

LLM builds one from the keyword arguments that name its fields, the server from its flags; either passes it whole
to the scheduler. A bad value is a ValueError naming the field, before any engine is built. Later chapters add
fields here (overlap scheduling, mixed batches, admission, speculation); a field that is None takes its default
from the environment (MINISGL_*) when the config is made.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    max_extend_tokens: int = 8192  # the prefill token budget of one batch: prompt tokens computed in one pass

    def __post_init__(self) -> None:
        check_int("max_extend_tokens", self.max_extend_tokens, minimum=1)


def check_int(name: str, value: object, minimum: int) -> None:
    """ValueError naming the field unless `value` is an integer >= minimum (a bool is not an integer here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
