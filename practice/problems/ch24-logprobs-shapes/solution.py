def utf8(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def chat_logprobs(entries: list[tuple[str, float, list[tuple[str, float]]]] | None) -> dict | None:
    if entries is None:
        return None
    content = []
    for token, logprob, top in entries:
        content.append({"token": token, "logprob": logprob, "bytes": utf8(token),
                        "top_logprobs": [{"token": t, "logprob": v, "bytes": utf8(t)} for t, v in top]})
    return {"content": content, "refusal": None}


def completion_logprobs(entries: list[tuple[str, float, list[tuple[str, float]]]] | None,
                        start: int = 0) -> tuple[dict | None, int]:
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if entries is None:
        return None, start
    offsets, at = [], start
    for token, _, _ in entries:
        offsets.append(at)
        at += len(token)  # characters, not bytes
    return {"tokens": [token for token, _, _ in entries], "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [dict(top) for _, _, top in entries], "text_offset": offsets}, at
