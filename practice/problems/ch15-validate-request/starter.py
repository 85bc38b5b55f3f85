def check_request(body) -> tuple[int, dict]:
    """(200, params) for a valid /v1/chat/completions body, else (400, an OpenAI error body)."""
    raise NotImplementedError
