def speculative_generate(target, propose, prompt: list[int], k: int, max_tokens: int,
                         eos: int | None = None) -> tuple[list[int], int]:
    """Greedy speculative decoding. target(tokens) is the model's greedy next token after `tokens`;
    propose(tokens, k) guesses up to k tokens that follow `tokens`. Each pass verifies one step's drafts:
    the longest prefix that target agrees with is kept, then target's own next token. Stops at max_tokens
    tokens or right after eos. Returns (output tokens, number of passes)."""
    raise NotImplementedError
