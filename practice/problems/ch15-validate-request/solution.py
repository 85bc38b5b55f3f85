FIELDS = ("messages", "max_tokens", "temperature", "top_p", "n", "stop", "stream", "seed")
ROLES = ("system", "user", "assistant")


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return _is_int(v) or isinstance(v, float)


def _messages(body) -> list:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("messages must be a non-empty list", "messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or set(m) != {"role", "content"} or m["role"] not in ROLES \
                or not isinstance(m["content"], str):
            raise BadRequest(f"messages[{i}] must be {{role: system/user/assistant, content: text}}", "messages")
    return msgs


def _number(body, name: str, low: float, high: float, low_open: bool) -> float:
    v = body.get(name, 1.0)
    if not _is_number(v) or v > high or v < low or (low_open and v == low):
        raise BadRequest(f"{name} must be a number in {'(' if low_open else '['}{low}, {high}], got {v!r}", name)
    return float(v)


def _stop(body) -> list:
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("stop must be a string or a list of at most 4 non-empty strings", "stop")
    return stop


def _params(body) -> dict:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", None)
    for key in body:
        if key not in FIELDS:
            raise BadRequest(f"unsupported parameter: {key}", key, "unsupported_parameter")
    msgs = _messages(body)
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and not (_is_int(max_tokens) and max_tokens >= 1):
        raise BadRequest(f"max_tokens must be an integer >= 1, got {max_tokens!r}", "max_tokens")
    temperature = _number(body, "temperature", 0.0, 2.0, low_open=False)
    top_p = _number(body, "top_p", 0.0, 1.0, low_open=True)
    n = body.get("n")
    if n is not None and not (_is_int(n) and n == 1):
        raise BadRequest(f"n={n!r} is not supported", "n", "unsupported_parameter")
    stop = _stop(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {stream!r}", "stream")
    seed = body.get("seed")
    if seed is not None and not (_is_int(seed) and seed >= 0):
        raise BadRequest(f"seed must be an integer >= 0, got {seed!r}", "seed")
    return {"messages": msgs, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "stop": stop,
            "stream": stream, "seed": seed}


def check_request(body) -> tuple[int, dict]:
    try:
        return 200, _params(body)
    except BadRequest as e:
        return 400, {"error": {"message": str(e), "type": "invalid_request_error", "param": e.param,
                               "code": e.code}}
