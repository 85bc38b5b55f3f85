import math

DEFAULTS = {"temperature": 0.0, "top_k": -1, "top_p": 1.0, "max_tokens": 16, "ignore_eos": False}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return _is_int(v) or isinstance(v, float)


def _problem(name: str, v):
    """The reason `v` is wrong for field `name`, or None."""
    if name == "temperature":
        if not _is_number(v):
            return f"must be a number, got {v!r}"
        if not math.isfinite(v) or v < 0:
            return f"must be finite and >= 0, got {v!r}"
    elif name == "top_k":
        if not _is_int(v):
            return f"must be an int, got {v!r}"
        if v != -1 and v < 1:
            return f"must be -1 or >= 1, got {v}"
    elif name == "top_p":
        if not _is_number(v):
            return f"must be a number, got {v!r}"
        if not 0 < v <= 1:  # also false for NaN
            return f"must be in (0, 1], got {v!r}"
    elif name == "max_tokens":
        if not _is_int(v):
            return f"must be an int, got {v!r}"
        if v < 1:
            return f"must be >= 1, got {v}"
    elif name == "ignore_eos":
        if not isinstance(v, bool):
            return f"must be a bool, got {v!r}"
    return None


def sampling_errors(params: dict) -> list[str]:
    errors = []
    for name in DEFAULTS:
        if name in params and (reason := _problem(name, params[name])) is not None:
            errors.append(f"{name}: {reason}")
    errors += [f"{name}: unknown parameter" for name in params if name not in DEFAULTS]
    return errors


def normalize(params: dict) -> dict:
    errors = sampling_errors(params)
    if errors:
        raise ValueError("; ".join(errors))
    out = {**DEFAULTS, **params}
    out["temperature"], out["top_p"] = float(out["temperature"]), float(out["top_p"])
    out["greedy"] = out["temperature"] == 0.0 or out["top_k"] == 1
    return out
