def grammar_fields(request: dict) -> tuple[str, str] | None:
    """The grammar a request's output must follow, as (kind, text) with kind "json_schema", "regex" or "ebnf",
    from its response_format and SGLang's regex / ebnf fields; None when it asks for none."""
    raise NotImplementedError
