def chat_logprobs(entries: list[tuple[str, float, list[tuple[str, float]]]] | None) -> dict | None:
    """The `logprobs` of a chat choice: {"content": [...], "refusal": None}. Each entry is (token text, its
    logprob, [(alternative text, logprob), ...] best first); None when no logprobs were asked for."""
    raise NotImplementedError


def completion_logprobs(entries: list[tuple[str, float, list[tuple[str, float]]]] | None,
                        start: int = 0) -> tuple[dict | None, int]:
    """The `logprobs` of a legacy completions choice (or of one chunk of its stream), the first token at
    character `start` of the choice's text, and the offset where the next chunk starts."""
    raise NotImplementedError
