import json


def grammar_fields(request: dict) -> tuple[str, str] | None:
    given = []
    fmt = request.get("response_format")
    if fmt is not None:
        kind = fmt.get("type")
        if kind == "json_object":
            given.append(("response_format", ("json_schema", '{"type": "object"}')))
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise ValueError("response_format json_schema needs json_schema.schema, a JSON object")
            given.append(("response_format", ("json_schema", json.dumps(schema))))
        elif kind != "text":  # "text" is the default: no grammar
            raise ValueError(f"response_format type must be text, json_object or json_schema, got {kind!r}")
    for name in ("regex", "ebnf"):
        if request.get(name) is not None:  # "" is a regex too
            given.append((name, (name, request[name])))
    if len(given) > 1:
        raise ValueError(f"give one of response_format, regex and ebnf, got {', '.join(n for n, _ in given)}")
    return given[0][1] if given else None
