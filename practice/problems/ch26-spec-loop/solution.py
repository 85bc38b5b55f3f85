def speculative_generate(target, propose, prompt: list[int], k: int, max_tokens: int,
                         eos: int | None = None) -> tuple[list[int], int]:
    if not prompt:
        raise ValueError("empty prompt")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    out: list[int] = []
    passes = 0
    while len(out) < max_tokens and not (out and out[-1] == eos):
        seq = list(prompt) + out
        drafts = list(propose(list(seq), k))
        if len(drafts) > k:
            raise ValueError(f"the proposer returned {len(drafts)} drafts, more than k = {k}")
        passes += 1  # one target pass scores every draft position and the one after the last draft
        for i in range(len(drafts) + 1):
            want = target(seq + drafts[:i])  # what greedy decoding would emit here
            out.append(want)  # equals drafts[i] while the drafts are right; else the correction
            if len(out) == max_tokens or want == eos:
                break
            if i == len(drafts) or drafts[i] != want:
                break  # the first wrong draft ends the step: everything after it was built on a wrong token
    return out, passes
