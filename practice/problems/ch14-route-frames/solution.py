ROUTES = {"tokenize": ("scheduler", "user"), "abort": ("scheduler", "abort"),
          "detokenize": ("frontend", "reply"), "error": ("frontend", "error_reply")}


def _messages(frame):
    """The messages a frame carries, nested batches flattened."""
    if isinstance(frame, list):
        return [m for inner in frame for m in _messages(inner)]
    return [frame]


def _batched(msgs: list):
    return None if not msgs else msgs[0] if len(msgs) == 1 else msgs


def route(frames: list) -> tuple[object, object, list[str]]:
    out = {"scheduler": [], "frontend": []}
    problems = []
    for kind, uid in _messages(frames):
        if kind not in ROUTES:
            problems.append(f"unknown message {kind}")
            continue
        where, new_kind = ROUTES[kind]
        out[where].append((new_kind, uid))
    return _batched(out["scheduler"]), _batched(out["frontend"]), problems
