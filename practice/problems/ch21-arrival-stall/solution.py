def arrival_costs(prompt_len: int, budget: int, decoders: int, step_ms: float, token_ms: float) -> dict:
    if prompt_len < 1 or decoders < 0 or budget <= decoders or step_ms < 0 or token_ms < 0:
        raise ValueError("need prompt_len >= 1, 0 <= decoders < budget, step_ms >= 0 and token_ms >= 0")

    def cost(tokens: int) -> float:
        return step_ms + token_ms * tokens

    def chunks(size: int) -> list[int]:
        full, rest = divmod(prompt_len, size)
        return [size] * full + ([rest] if rest else [])

    prefill_steps = [cost(c) for c in chunks(budget)]
    mixed_steps = [cost(decoders + c) for c in chunks(budget - decoders)]
    return {"gap_off": sum(prefill_steps) + cost(decoders + 1), "gap_on": max(mixed_steps),
            "ttft_off": sum(prefill_steps), "ttft_on": sum(mixed_steps)}
