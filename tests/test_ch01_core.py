"""Chapter 1: Req length bookkeeping, batches and the forward context."""

from __future__ import annotations

import pytest
import torch

from minisgl.core import Batch, Context, Req, SamplingParams, get_global_ctx, set_global_ctx


def kwargs_id(value) -> str | None:
    """Readable test ids: top_k=-2 rather than kwargs5."""
    if not isinstance(value, dict):
        return None
    return ",".join(f"{k}={v}" for k, v in value.items()) or "defaults"


def make_req(prompt_len: int = 5, max_tokens: int = 3, cached_len: int = 0, uid: int = 0) -> Req:
    ids = torch.arange(10, 10 + prompt_len, dtype=torch.int32)
    return Req(ids, table_idx=0, cached_len=cached_len, output_len=max_tokens, uid=uid,
               sampling_params=SamplingParams(max_tokens=max_tokens))


@pytest.mark.stubs("Req.extend_len", "Req.remain_len")
def test_fresh_request_lengths():
    req = make_req(prompt_len=5, max_tokens=3)
    assert (req.cached_len, req.device_len, req.max_device_len) == (0, 5, 8), f"(cached, device, max) of {req}"
    assert req.extend_len == 5, "a fresh request computes its whole prompt"
    assert req.remain_len == 3, f"remain_len {req.remain_len}: 3 tokens may still be generated"
    assert req.can_decode, "a request with tokens left can decode"


@pytest.mark.stubs("Req.extend_len")
def test_cached_prefix_shortens_extend():
    req = make_req(prompt_len=8, cached_len=6)
    assert req.extend_len == 2, "only the tokens after the cached prefix are computed"


@pytest.mark.stubs("Req.complete_one", "Req.extend_len", "Req.remain_len")
def test_complete_one_walks_the_ranges():
    req = make_req(prompt_len=5, max_tokens=3)
    req.complete_one()  # after prefill
    lengths = lambda: (req.cached_len, req.device_len, req.extend_len, req.remain_len)  # noqa: E731
    assert lengths() == (5, 6, 1, 2), f"(cached, device, extend, remain) after prefill: {lengths()}"
    req.complete_one()  # after one decode step
    assert lengths() == (6, 7, 1, 1), f"(cached, device, extend, remain) after one decode step: {lengths()}"
    req.complete_one()
    assert req.remain_len == 0 and not req.can_decode, f"max_tokens reached, yet remain_len is {req.remain_len}"


@pytest.mark.stubs("Req.append_host")
def test_append_host_appends_on_the_cpu_copy():
    req = make_req(prompt_len=2)
    req.append_host(7)
    req.append_host(8)
    assert req.input_ids.dtype == torch.int32, f"input_ids became {req.input_ids.dtype}"
    assert req.input_ids.tolist() == [10, 11, 7, 8], f"host sequence {req.input_ids.tolist()}"
    assert req.device_len == 2, "append_host only touches the host copy"


@pytest.mark.stubs("Req.append_host", "Req.complete_one")
def test_append_host_keeps_dtype_and_grows_output():
    req = make_req(prompt_len=4, max_tokens=2)
    req.complete_one()
    req.append_host(99)
    assert req.input_ids.dtype == torch.int32, f"input_ids became {req.input_ids.dtype}"
    assert req.input_ids.tolist() == [10, 11, 12, 13, 99], f"host sequence {req.input_ids.tolist()}"
    assert req.output_ids == [99], f"output_ids {req.output_ids}"
    assert len(req.input_ids) == req.device_len, "host and device agree on the sequence length"


@pytest.mark.stubs("Req.complete_one", "Req.append_host", "Req.remain_len")
def test_generation_produces_exactly_max_tokens():
    req = make_req(prompt_len=3, max_tokens=4)
    steps = 0
    while req.can_decode:
        req.complete_one()
        req.append_host(steps)
        steps += 1
    assert steps == 4 and req.output_ids == [0, 1, 2, 3], f"{steps} steps produced {req.output_ids}"


@pytest.mark.stubs("Context.forward_batch")
def test_forward_batch_sets_and_resets():
    ctx = Context()
    batch = Batch([make_req()], "prefill")
    with pytest.raises(RuntimeError):
        _ = ctx.batch
    with ctx.forward_batch(batch) as b:
        assert b is batch and ctx.batch is batch, "inside the block, the context's batch is the one given"
    with pytest.raises(RuntimeError):
        _ = ctx.batch


@pytest.mark.stubs("Context.forward_batch")
def test_forward_batch_resets_on_error_and_refuses_nesting():
    ctx = Context()
    batch = Batch([make_req()], "decode")
    with pytest.raises(KeyError):
        with ctx.forward_batch(batch):
            raise KeyError("boom")
    with pytest.raises(RuntimeError):  # the batch must be reset even when the forward pass raises
        _ = ctx.batch
    with ctx.forward_batch(batch):
        with pytest.raises(RuntimeError):
            with ctx.forward_batch(batch):
                pass
        assert ctx.batch is batch, "a refused nested call leaves the outer batch in place"


def test_global_context_roundtrip():
    ctx = Context(page_size=4)
    set_global_ctx(ctx)
    assert get_global_ctx() is ctx, "get_global_ctx returns the context set last"


@pytest.mark.parametrize("kwargs", [{"max_tokens": 0}, {"max_tokens": -3}, {"max_tokens": 2.5},
                                    {"temperature": -1.0}, {"top_k": 0}, {"top_k": -2}, {"top_k": -100},
                                    {"top_p": 0.0}, {"top_p": -0.5}, {"top_p": 1.5}], ids=kwargs_id)
def test_bad_sampling_params_are_refused_naming_the_field(kwargs):
    (field, value), = kwargs.items()
    with pytest.raises(ValueError, match=field) as refused:
        SamplingParams(**kwargs)
    assert str(value) in str(refused.value), f"the error {str(refused.value)!r} does not show the value {value}"


@pytest.mark.parametrize("kwargs", [{}, {"top_k": -1}, {"top_k": 1}, {"top_k": 50}, {"top_p": 1.0},
                                    {"top_p": 1e-3}, {"temperature": 0.0}, {"temperature": 2.0}, {"seed": 0},
                                    {"seed": 2**63 - 1}], ids=kwargs_id)
def test_good_sampling_params_are_accepted(kwargs):
    params = SamplingParams(**kwargs)
    assert [getattr(params, k) for k in kwargs] == list(kwargs.values()), f"{params} does not keep {kwargs}"


@pytest.mark.parametrize("kwargs,greedy", [
    ({}, True),  # temperature 0 by default
    ({"temperature": 0.0, "top_k": 40, "top_p": 0.5}, True),
    ({"temperature": 0.8, "top_k": 1}, True),  # one candidate left: sampling it is taking the argmax
    ({"temperature": 1.5, "top_k": 1, "top_p": 0.9}, True),
    ({"temperature": 0.8}, False),
    ({"temperature": 0.8, "top_k": 2}, False),
    ({"temperature": 0.8, "top_k": -1, "top_p": 0.1}, False),
], ids=kwargs_id)
def test_is_greedy_when_one_token_can_win(kwargs, greedy):
    assert SamplingParams(**kwargs).is_greedy is greedy, f"SamplingParams(**{kwargs}).is_greedy should be {greedy}"


@pytest.mark.parametrize("cached_len", [-1, 5, 6])
def test_cached_len_stays_below_the_sequence_length(cached_len):
    """At least one token is always left to compute: a request whose whole prompt is cached would have nothing
    to run its forward pass on (no logits to sample from)."""
    with pytest.raises(ValueError, match="cached_len"):
        make_req(prompt_len=5, cached_len=cached_len)
    assert make_req(prompt_len=5, cached_len=4).cached_len == 4, "cached_len = prompt_len - 1 is allowed"


def test_batch_validation():
    with pytest.raises(ValueError):
        Batch([], "prefill")
    with pytest.raises(ValueError, match="phase"):
        Batch([make_req()], "extend")
    assert Batch([make_req(), make_req(uid=1)], "decode").size == 2, "one entry per request"


@pytest.mark.stubs("Context.forward_batch")
def test_forward_batch_makes_its_context_the_global_one_and_puts_the_previous_back():
    outer, inner = Context(), Context()
    set_global_ctx(outer)
    batch = Batch([make_req()], "decode")
    with inner.forward_batch(batch):
        assert get_global_ctx() is inner and get_global_ctx().batch is batch, "layers must find the forwarding context"
    assert get_global_ctx() is outer, "the previous global context comes back"
    with pytest.raises(KeyError):
        with inner.forward_batch(batch):
            raise KeyError("boom")
    assert get_global_ctx() is outer, "even when the forward pass raises"


@pytest.mark.parametrize("field, value", [("temperature", float("nan")), ("temperature", float("inf")),
                                          ("top_k", 2.5), ("max_tokens", True), ("max_tokens", 3.0),
                                          ("top_p", float("nan")), ("ignore_eos", "yes"), ("top_k", -2),
                                          ("seed", -1), ("seed", True), ("seed", 1.5), ("seed", 2**63)])
def test_each_bad_field_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"^{field} must"):
        SamplingParams(**{field: value})


def test_a_field_changed_after_construction_is_caught_by_validate():
    params = SamplingParams(max_tokens=4)
    params.validate()
    params.max_tokens = -200
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1, got -200"):
        params.validate()


def test_numpy_integers_are_accepted_as_ints():
    numpy = pytest.importorskip("numpy")
    params = SamplingParams(max_tokens=numpy.int64(5), top_k=numpy.int32(3))
    assert (params.max_tokens, params.top_k) == (5, 3) and type(params.max_tokens) is int


@pytest.mark.parametrize("temperature, greedy", [(0.0, True), (1e-45, True), (9e-6, True), (1e-5, False), (0.7, False)])
def test_temperatures_too_small_to_divide_by_are_greedy(temperature, greedy):
    assert SamplingParams(temperature=temperature).is_greedy is greedy
