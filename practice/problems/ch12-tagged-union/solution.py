PLAIN = {"int": int, "float": float, "str": str, "bool": bool}


def encode(record: dict, schema: dict) -> list:
    kind = record.get("type")
    if kind not in schema:
        raise ValueError(f"unknown record kind {kind!r}")
    out = [kind]
    for name, spec in schema[kind].items():
        if name not in record:
            raise ValueError(f"{kind}.{name}: missing")
        out.append(_encode_value(record[name], spec, schema))
    return out


def _encode_value(value, spec: str, schema: dict):
    if spec.startswith("list["):
        return [_encode_value(v, spec[5:-1], schema) for v in value]
    if spec == "*" or spec in schema:
        return encode(value, schema)
    return value


def decode(data, schema: dict, path: str = "message", kinds=None) -> dict:
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ValueError(f"{path}: expected a record [tag, ...], got {type(data).__name__}")
    kind = data[0]
    if kind not in schema or (kinds is not None and kind not in kinds):
        raise ValueError(f"{path}: unknown or unexpected record kind {kind!r}")
    fields = schema[kind]
    if len(data) - 1 != len(fields):
        raise ValueError(f"{path}: {kind} has {len(fields)} fields, got {len(data) - 1} values")
    record = {"type": kind}
    prefix = kind if path == "message" else path  # nested fields extend their parent's path
    for (name, spec), value in zip(fields.items(), data[1:]):
        record[name] = _decode_value(value, spec, schema, f"{prefix}.{name}")
    return record


def _decode_value(value, spec: str, schema: dict, path: str):
    if spec.startswith("list["):
        if not isinstance(value, list):
            raise ValueError(f"{path}: expected a list, got {type(value).__name__}")
        return [_decode_value(v, spec[5:-1], schema, f"{path}[{i}]") for i, v in enumerate(value)]
    if spec == "*":
        return decode(value, schema, path)
    if spec in schema:
        return decode(value, schema, path, kinds={spec})
    want = PLAIN[spec]
    if want is float and type(value) is int:
        return float(value)
    if type(value) is not want:  # type(), not isinstance: a bool must not pass for an int
        raise ValueError(f"{path}: expected {spec}, got {type(value).__name__}")
    return value
