def ratio_trace(init: float, min_ratio: float, decay_steps: int, events: list) -> list[float]:
    """The new-token ratio after each event: "step" (decay, floor min_ratio), ("retract", [(generated,
    max_tokens), ...]) (the observed share, at least init, at most 1), "idle" (back to init)."""
    raise NotImplementedError
