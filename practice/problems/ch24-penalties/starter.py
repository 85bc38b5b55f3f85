def apply_penalties(logits: list[float], prompt: list[int], output: list[int], presence: float = 0.0,
                    frequency: float = 0.0, repetition: float = 1.0) -> list[float]:
    """One row of logits after the penalties: first the repetition penalty over every token seen in the prompt
    or the output, then OpenAI's frequency and presence penalties over the output only. Returns a new list."""
    raise NotImplementedError
