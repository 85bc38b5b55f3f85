from solution import check_request

EXAMPLES = ["test_statement_examples", "test_defaults"]

HI = [{"role": "user", "content": "Hi"}]


def _refused(body, param, code=None):
    status, out = check_request(body)
    assert status == 400, f"{body!r} must be refused, got {status} {out}"
    err = out.get("error")
    assert isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}, f"error body shape: {out}"
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["code"] == code, \
        f"{body!r}: want param {param!r}, code {code!r}; got {err}"
    assert isinstance(err["message"], str) and err["message"] and (param is None or param in err["message"]), \
        f"the message names the parameter: {err['message']!r}"


def test_statement_examples():
    status, params = check_request({"messages": HI, "stop": "END", "temperature": 0})
    assert status == 200 and params == {"messages": HI, "max_tokens": None, "temperature": 0.0, "top_p": 1.0,
                                        "stop": ["END"], "stream": False, "seed": None}, params
    assert isinstance(params["temperature"], float)
    _refused({"messages": HI, "max_tokens": "20"}, "max_tokens")


def test_defaults():
    assert check_request({"messages": HI}) == (200, {"messages": HI, "max_tokens": None, "temperature": 1.0,
                                                     "top_p": 1.0, "stop": [], "stream": False, "seed": None})


def test_everything_given():
    body = {"seed": 7, "stream": True, "stop": ["a", "b"], "n": 1, "top_p": 0.5, "temperature": 2,
            "max_tokens": 5, "messages": HI + [{"role": "assistant", "content": ""}]}
    assert check_request(body) == (200, {"messages": body["messages"], "max_tokens": 5, "temperature": 2.0,
                                         "top_p": 0.5, "stop": ["a", "b"], "stream": True, "seed": 7})
    assert check_request({"messages": HI, "n": None, "seed": None, "max_tokens": None, "stop": None})[0] == 200


def test_not_an_object():
    for body in ([], "hi", None, 3):
        _refused(body, None)


def test_unknown_fields_first_in_body_order():
    _refused({"messages": HI, "logprobs": True}, "logprobs", "unsupported_parameter")
    _refused({"frequency_penalty": 0.5, "messages": 3, "best_of": 2}, "frequency_penalty", "unsupported_parameter")


def test_messages():
    for bad in (None, [], "Hi", [{"role": "user"}], [{"role": "bot", "content": "x"}],
                [{"role": "user", "content": 5}], [{"role": "user", "content": "x", "name": "y"}], ["Hi"]):
        body = {"messages": bad} if bad is not None else {}
        _refused(body, "messages")


def test_booleans_are_not_numbers_and_floats_are_not_integers():
    _refused({"messages": HI, "max_tokens": True}, "max_tokens")
    _refused({"messages": HI, "max_tokens": 2.0}, "max_tokens")
    _refused({"messages": HI, "temperature": False}, "temperature")
    _refused({"messages": HI, "seed": True}, "seed")
    _refused({"messages": HI, "n": True}, "n", "unsupported_parameter")
    _refused({"messages": HI, "stream": 1}, "stream")


def test_ranges():
    _refused({"messages": HI, "max_tokens": 0}, "max_tokens")
    _refused({"messages": HI, "temperature": -0.1}, "temperature")
    _refused({"messages": HI, "temperature": 2.5}, "temperature")
    _refused({"messages": HI, "top_p": 0}, "top_p")
    _refused({"messages": HI, "top_p": 1.01}, "top_p")
    _refused({"messages": HI, "seed": -1}, "seed")
    assert check_request({"messages": HI, "top_p": 1, "temperature": 0.0})[0] == 200


def test_n_and_stop():
    _refused({"messages": HI, "n": 2}, "n", "unsupported_parameter")
    _refused({"messages": HI, "stop": ""}, "stop")
    _refused({"messages": HI, "stop": ["a", ""]}, "stop")
    _refused({"messages": HI, "stop": ["a", "b", "c", "d", "e"]}, "stop")
    _refused({"messages": HI, "stop": 5}, "stop")
    _refused({"messages": HI, "stop": ["a", 5]}, "stop")


def test_the_first_problem_wins():
    _refused({"messages": [], "max_tokens": 0, "n": 3}, "messages")
    _refused({"messages": HI, "max_tokens": 0, "n": 3}, "max_tokens")
    _refused({"messages": HI, "top_p": 5, "n": 3, "stop": ""}, "top_p")
    _refused({"messages": HI, "n": 3, "stop": ""}, "n", "unsupported_parameter")
    _refused({"messages": HI, "stop": "", "stream": "yes", "seed": -1}, "stop")
    _refused({"messages": HI, "stream": "yes", "seed": -1}, "stream")
