import json
import random

from solution import grammar_fields

EXAMPLES = ["test_statement_examples", "test_statement_errors"]

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def raises(request: dict, *names: str) -> str:
    try:
        got = grammar_fields(request)
    except ValueError as e:
        message = str(e)
        for name in names:
            assert name in message, f"grammar_fields({request}): the error should name {name!r}, got {message!r}"
        return message
    raise AssertionError(f"grammar_fields({request}) should raise ValueError, returned {got!r}")


def test_statement_examples():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    got = grammar_fields({"model": "m", "response_format": fmt})
    want = ("json_schema", json.dumps(SCHEMA))
    assert got == want, f"expected {want}, got {got}"
    got = grammar_fields({"response_format": {"type": "json_object"}})
    assert got == ("json_schema", '{"type": "object"}'), f"json_object is any JSON object; got {got}"
    got = grammar_fields({"regex": "(yes|no)"})
    assert got == ("regex", "(yes|no)"), f"expected ('regex', '(yes|no)'), got {got}"
    got = grammar_fields({"response_format": {"type": "text"}})
    assert got is None, f"text asks for no grammar: expected None, got {got}"
    got = grammar_fields({"model": "m", "messages": []})
    assert got is None, f"nothing asked for: expected None, got {got}"


def test_statement_errors():
    raises({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format")
    raises({"response_format": {"type": "yaml"}}, "response_format")
    raises({"response_format": {"type": "json_object"}, "regex": "a+"}, "response_format", "regex")


def test_ebnf():
    grammar = 'root ::= "yes" | "no"'
    got = grammar_fields({"ebnf": grammar})
    assert got == ("ebnf", grammar), f"expected ('ebnf', {grammar!r}), got {got}"


def test_absent_and_null_are_the_same():
    for request in ({}, {"response_format": None}, {"regex": None, "ebnf": None},
                    {"response_format": None, "regex": None, "ebnf": None, "temperature": 0.0}):
        got = grammar_fields(request)
        assert got is None, f"grammar_fields({request}): a field set to null is not given; expected None, got {got}"
    got = grammar_fields({"response_format": None, "regex": None, "ebnf": "root ::= [a-z]+"})
    assert got == ("ebnf", "root ::= [a-z]+"), f"only ebnf is given: got {got}"


def test_an_empty_string_is_given():
    got = grammar_fields({"regex": ""})
    assert got == ("regex", ""), f"an empty regex is present and not null: it is given; expected ('regex', ''), got {got}"
    raises({"regex": "", "ebnf": ""}, "regex", "ebnf")


def test_text_with_a_regex_is_one_grammar():
    got = grammar_fields({"response_format": {"type": "text"}, "regex": "[0-9]+"})
    assert got == ("regex", "[0-9]+"), \
        f"response_format text asks for no grammar, so the regex is the only one: expected ('regex', '[0-9]+'), got {got}"
    got = grammar_fields({"response_format": {"type": "text"}, "ebnf": "root ::= \"a\""})
    assert got == ("ebnf", "root ::= \"a\""), f"expected the ebnf, got {got}"


def test_the_schema_is_json_text():
    schema = {"type": "array", "items": {"type": "number"}, "minItems": 2, "title": "点"}
    got = grammar_fields({"response_format": {"type": "json_schema",
                                              "json_schema": {"name": "pts", "strict": True, "schema": schema}}})
    assert got == ("json_schema", json.dumps(schema)), \
        f"the schema as json.dumps writes it (not str() of the dict): expected {json.dumps(schema)!r}, got {got}"
    got = grammar_fields({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})
    assert got == ("json_schema", "{}"), f"an empty schema is still a JSON object: expected ('json_schema', '{{}}'), got {got}"


def test_a_json_schema_needs_a_schema_object():
    for fmt in ({"type": "json_schema"}, {"type": "json_schema", "json_schema": None},
                {"type": "json_schema", "json_schema": "person"}, {"type": "json_schema", "json_schema": {}},
                {"type": "json_schema", "json_schema": {"name": "p", "schema": None}},
                {"type": "json_schema", "json_schema": {"name": "p", "schema": json.dumps(SCHEMA)}},
                {"type": "json_schema", "json_schema": {"name": "p", "schema": [SCHEMA]}},
                {"type": "json_schema", "schema": SCHEMA}):
        raises({"response_format": fmt}, "response_format")


def test_unknown_types():
    for fmt in ({"type": "JSON_OBJECT"}, {"type": "regex"}, {"type": None}, {}, {"json_schema": {"schema": SCHEMA}}):
        raises({"response_format": fmt}, "response_format")


def test_more_than_one():
    obj = {"type": "json_object"}
    schema = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
    raises({"response_format": schema, "ebnf": "root ::= \"a\""}, "response_format", "ebnf")
    raises({"regex": "a", "ebnf": "root ::= \"a\""}, "regex", "ebnf")
    raises({"response_format": obj, "regex": "a", "ebnf": "root ::= \"a\""}, "response_format", "regex", "ebnf")
    raises({"response_format": {"type": "text"}, "regex": "a", "ebnf": "root ::= \"a\""}, "regex", "ebnf")


def test_the_request_is_not_changed():
    request = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
               "regex": None}
    before = json.dumps(request)
    grammar_fields(request)
    assert json.dumps(request) == before, f"the request passed in was changed: {request}"


def test_random_requests():
    rng = random.Random(25)
    formats = [None, {"type": "text"}, {"type": "json_object"},
               {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}]
    for _ in range(200):
        request, want = {}, []
        fmt = rng.choice(formats + ["absent"])
        if fmt != "absent":
            request["response_format"] = fmt
        if fmt in formats[2:]:
            want.append(("json_schema", '{"type": "object"}' if fmt["type"] == "json_object" else json.dumps(SCHEMA)))
        for name in ("regex", "ebnf"):
            value = rng.choice(["absent", None, "", "x+"])
            if value != "absent":
                request[name] = value
            if value not in ("absent", None):
                want.append((name, value))
        if len(want) > 1:
            raises(request)
        else:
            got = grammar_fields(request)
            assert got == (want[0] if want else None), f"grammar_fields({request}): expected {want}, got {got}"
