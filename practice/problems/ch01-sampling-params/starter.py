DEFAULTS = {"temperature": 0.0, "top_k": -1, "top_p": 1.0, "max_tokens": 16, "ignore_eos": False}


def sampling_errors(params: dict) -> list[str]:
    """One "<field>: <reason>" message per problem, in DEFAULTS order, unknown fields last."""
    raise NotImplementedError


def normalize(params: dict) -> dict:
    """ValueError("; ".join(errors)) if any; else all five fields (temperature, top_p as float) + "greedy"."""
    raise NotImplementedError
