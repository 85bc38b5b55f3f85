import random

from solution import decode, encode

EXAMPLES = ["test_statement_examples", "test_errors_name_the_path"]

SCHEMA = {
    "User": {"uid": "int", "ids": "list[int]", "temp": "float"},
    "Abort": {"uid": "int"},
    "Batch": {"items": "list[*]"},
}


def _raises(data, schema, path):
    try:
        decode(data, schema)
    except ValueError as e:
        assert str(e).startswith(path), f"decode({data!r}): the error should start with {path!r}, got {e}"
        return
    raise AssertionError(f"decode({data!r}) should raise ValueError (at {path})")


def test_statement_examples():
    assert encode({"type": "Abort", "uid": 7}, SCHEMA) == ["Abort", 7]
    assert encode({"type": "Batch", "items": [{"type": "Abort", "uid": 1}]}, SCHEMA) == ["Batch", [["Abort", 1]]]
    got = decode(["User", 3, [5, 6], 1], SCHEMA)
    assert got == {"type": "User", "uid": 3, "ids": [5, 6], "temp": 1.0}, f"got {got}"
    assert type(got["temp"]) is float, "an int in a float field becomes a float"
    _raises(["User", 3, [5, "6"], 1.0], SCHEMA, "User.ids[1]")


def test_fields_in_schema_order():
    rec = {"temp": 0.5, "ids": [], "type": "User", "uid": 2}
    assert encode(rec, SCHEMA) == ["User", 2, [], 0.5], "values follow the schema's field order, not the dict's"


def test_errors_name_the_path():
    _raises(5, SCHEMA, "message")
    _raises([], SCHEMA, "message")
    _raises([7, 1], SCHEMA, "message")
    _raises(["Nope", 1], SCHEMA, "message")
    _raises(["Abort"], SCHEMA, "message")
    _raises(["Abort", 1, 2], SCHEMA, "message")
    _raises(["Abort", True], SCHEMA, "Abort.uid")
    _raises(["Abort", 1.0], SCHEMA, "Abort.uid")
    _raises(["User", 1, (1, 2), 0.0], SCHEMA, "User.ids")
    _raises(["User", 1, [1], "hot"], SCHEMA, "User.temp")
    _raises(["Batch", [["Abort", 1], ["Abort", "x"]]], SCHEMA, "Batch.items[1].uid")
    _raises(["Batch", [["Batch", [["User", 1, [2, None], 0.0]]]]], SCHEMA, "Batch.items[0].items[0].ids[1]")
    _raises(["Batch", [["Abort", 1], 3]], SCHEMA, "Batch.items[1]")


def test_named_record_field_accepts_only_that_kind():
    schema = {"Pair": {"a": "Abort", "b": "Abort"}, "Abort": {"uid": "int"}}
    assert decode(["Pair", ["Abort", 1], ["Abort", 2]], schema)["b"] == {"type": "Abort", "uid": 2}
    _raises(["Pair", ["Abort", 1], ["Pair", ["Abort", 1], ["Abort", 2]]], schema, "Pair.b")


def test_encode_refuses_unknown_kind_and_missing_field():
    for bad in ({"type": "Nope"}, {"uid": 1}, {"type": "User", "uid": 1, "ids": []}):
        try:
            encode(bad, SCHEMA)
        except ValueError:
            continue
        raise AssertionError(f"encode({bad}) should raise ValueError")


def _random_record(rng, depth=0):
    kind = rng.choice(["User", "Abort"] + (["Batch"] if depth < 3 else []))
    if kind == "User":
        ids = [rng.randint(-5, 99) for _ in range(rng.randint(0, 4))]
        return {"type": "User", "uid": rng.randint(0, 2**40), "ids": ids, "temp": rng.choice([0.0, 0.5, 1.25])}
    if kind == "Abort":
        return {"type": "Abort", "uid": rng.randint(0, 9)}
    return {"type": "Batch", "items": [_random_record(rng, depth + 1) for _ in range(rng.randint(0, 3))]}


def test_random_round_trips():
    rng = random.Random(12)
    for trial in range(300):
        rec = _random_record(rng)
        data = encode(rec, SCHEMA)
        assert isinstance(data, list) and data[0] == rec["type"], f"trial {trial}: {data!r} is not [tag, ...]"
        assert decode(data, SCHEMA) == rec, f"trial {trial}: {rec} came back as {decode(data, SCHEMA)}"
