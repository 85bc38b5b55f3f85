import random

from solution import normalize, sampling_errors

EXAMPLES = ["test_statement_example", "test_defaults"]

FIELDS = ["temperature", "top_k", "top_p", "max_tokens", "ignore_eos"]


def fields_of(errors):
    assert isinstance(errors, list), f"sampling_errors must return a list, got {errors!r}"
    for e in errors:
        assert isinstance(e, str) and ": " in e, f"every message looks like '<field>: <reason>', got {e!r}"
    return [e.split(": ", 1)[0] for e in errors]


def test_statement_example():
    errors = sampling_errors({"top_k": 0, "max_tokens": 2.5, "topp": 0.9})
    assert fields_of(errors) == ["top_k", "max_tokens", "topp"], f"expected top_k, max_tokens, topp reported, got {errors}"
    assert errors[2] == "topp: unknown parameter", f"got {errors[2]!r}"
    got = normalize({"temperature": 1, "top_k": 1})
    expected = {"temperature": 1.0, "top_k": 1, "top_p": 1.0, "max_tokens": 16, "ignore_eos": False, "greedy": True}
    assert got == expected, f"expected {expected}, got {got}"
    assert isinstance(got["temperature"], float), "temperature is returned as a float"


def test_defaults():
    assert sampling_errors({}) == [], f"no params is valid, got {sampling_errors({})}"
    expected = {"temperature": 0.0, "top_k": -1, "top_p": 1.0, "max_tokens": 16, "ignore_eos": False, "greedy": True}
    assert normalize({}) == expected, f"expected {expected}, got {normalize({})}"


def test_each_bad_value_names_its_field():
    bad = {
        "temperature": [-0.1, float("inf"), float("nan"), "1.0", None, True],
        "top_k": [0, -2, 2.0, True, "5"],
        "top_p": [0, 0.0, 1.0001, -0.5, float("nan"), False, "0.9"],
        "max_tokens": [0, -3, 16.0, True, None],
        "ignore_eos": [0, 1, "yes", None],
    }
    for field, values in bad.items():
        for v in values:
            errors = sampling_errors({field: v})
            assert fields_of(errors) == [field], f"{field}={v!r} should give exactly one error for {field}, got {errors}"


def test_edge_values_are_valid():
    good = [{"temperature": 0}, {"temperature": 2.5}, {"top_k": -1}, {"top_k": 1}, {"top_k": 50},
            {"top_p": 1}, {"top_p": 1e-9}, {"max_tokens": 1}, {"ignore_eos": True}]
    for p in good:
        assert sampling_errors(p) == [], f"{p} is valid, got {sampling_errors(p)}"


def test_normalize_raises_with_every_error():
    try:
        normalize({"ignore_eos": "no", "temperature": -1, "seed": 3})
    except ValueError as e:
        parts = str(e).split("; ")
        assert fields_of(parts) == ["temperature", "ignore_eos", "seed"], \
            f"the message joins all errors in table order, unknown last: got {str(e)!r}"
        return
    raise AssertionError("normalize with bad params should raise ValueError")


def test_greedy_and_no_mutation():
    params = {"temperature": 0.7, "top_k": 20, "top_p": 0.9}
    got = normalize(params)
    assert got["greedy"] is False, f"temperature 0.7 with top_k 20 samples, got greedy={got['greedy']}"
    assert params == {"temperature": 0.7, "top_k": 20, "top_p": 0.9}, "normalize must not change its argument"
    assert normalize({"temperature": 5.0, "top_k": 1})["greedy"] is True, "top_k == 1 is greedy at any temperature"


def test_random_combinations():
    rng = random.Random(3)
    choices = {
        "temperature": ([0, 0.5, 1.3], [-1, float("inf"), "x"]),
        "top_k": ([-1, 1, 40], [0, -5, 3.0]),
        "top_p": ([0.1, 1, 0.95], [0, 1.5, None]),
        "max_tokens": ([1, 16, 4096], [0, 2.0, False]),
        "ignore_eos": ([True, False], [1, "true"]),
    }
    for _ in range(300):
        params, expect = {}, []
        for field in FIELDS:
            r = rng.random()
            if r < 0.3:
                continue
            good, bad = choices[field]
            if r < 0.7:
                params[field] = rng.choice(good)
            else:
                params[field] = rng.choice(bad)
                expect.append(field)
        unknown = ["seed", "n", "stop"][: rng.randint(0, 2)]
        for u in unknown:
            params[u] = 1
        expect += unknown
        got = sampling_errors(params)
        assert fields_of(got) == expect, f"params {params}: expected errors for {expect}, got {got}"
