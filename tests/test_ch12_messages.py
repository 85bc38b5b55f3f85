"""Chapter 12: messages and ZMQ. Every message type round-trips exactly through msgpack and through a ZMQ queue
between two processes; bad frames give a MessageError and the queue goes on; nothing is left running."""

from __future__ import annotations

import dataclasses
import multiprocessing
import time

import msgpack
import pytest
import torch
import zmq

from minisgl.core import SamplingParams
from minisgl.message.utils import decode_value
from minisgl.message import (WIRE_VERSION, AbortBackendMsg, AbortMsg, BaseBackendMsg, BaseFrontendMsg,
                             BaseTokenizerMsg, BatchBackendMsg, BatchFrontendMsg, BatchTokenizerMsg, DetokenizeMsg,
                             ErrorMsg, ErrorReply, ExitMsg, GetStatusMsg, HoldMsg, MessageError, StatusMsg,
                             StatusReply, TokenizeMsg, UserMsg, UserReply, UserReplyBatch, batched, decode_message,
                             encode_message, pack_replies, unwrap)
from minisgl.utils.mp import ZmqPullQueue, ZmqPushQueue

CODEC = ("encode_value", "decode_value", "decode_message")
ANY_MSG = BaseBackendMsg | BaseTokenizerMsg | BaseFrontendMsg
FAMILY = {cls: base for base in (BaseBackendMsg, BaseTokenizerMsg, BaseFrontendMsg)
          for cls in (*base.__subclasses__(), base)}


def user_msg(uid: int, ids: list[int], dtype=torch.int32, **params) -> UserMsg:
    return UserMsg(uid, torch.tensor(ids, dtype=dtype), SamplingParams(**params))


def samples() -> list:
    """One or more of every message type, with values that a sloppy encoding would change."""
    hot = dict(temperature=0.7, top_k=20, top_p=0.95, max_tokens=33, ignore_eos=True, seed=2**62 + 1)
    return [
        user_msg(0, [1, 2, 3, 151643]),
        user_msg(2**40, [0, -1, 2**31 - 1], **hot),  # a uid past 32 bits, extreme int32 ids
        user_msg(7, [2**40, 5], dtype=torch.int64),
        user_msg(8, []),
        AbortBackendMsg(5), ExitMsg(),
        BatchBackendMsg([user_msg(1, [9, 8]), AbortBackendMsg(1), BatchBackendMsg([]), ExitMsg()]),
        TokenizeMsg(3, "héllo, wörld ✓", SamplingParams(max_tokens=4)),
        TokenizeMsg(4, [{"role": "system", "content": ""}, {"role": "user", "content": "2+2?"}], SamplingParams(**hot)),
        TokenizeMsg(5, [151643, 0, 17], SamplingParams(), stop=["\n\n", "é"], stop_token_ids=[2, 3],
                    auto_max_tokens=True),
        DetokenizeMsg.one(3, 42), DetokenizeMsg.one(3, 0, "length"), AbortMsg(9),
        DetokenizeMsg([1, 2**40, 1], [7, 151643, 0], ["", "stop", "length"]), DetokenizeMsg([], [], []),
        ErrorMsg(6, "prompt too long: 9000 > 4096"), StatusMsg(7, {"running": 2, "free_slots": 2**40}),
        GetStatusMsg(7), HoldMsg(8, 0), HoldMsg(9, None), HoldMsg(10, 3),
        BatchTokenizerMsg([DetokenizeMsg.one(1, 2, "stop"), AbortMsg(1), TokenizeMsg(2, "x", SamplingParams())]),
        UserReply(3, "", False), UserReply(3, "déjà vu\n", True, "stop", 12, 2**33),
        ErrorReply(4, "the prompt is empty"), StatusReply(8, {}),
        BatchFrontendMsg([UserReply(1, "a", False), UserReply(2, "b", True)]),
        UserReplyBatch.pack([UserReply(1, "a\u00e9", False, None, 3, 1), UserReply(2**40, "", True, "stop", 9, 2**33)]),
    ]


def plain(value):
    """A message as nested tuples that == compares fully: class names, field values, tensor dtype and ids."""
    if isinstance(value, torch.Tensor):
        return ("Tensor", str(value.dtype), tuple(value.shape), value.tolist())
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, *((f.name, plain(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, (list, tuple)):
        return ("list", *(plain(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, plain(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def through_msgpack(msg):
    family = FAMILY[type(msg)]
    return family.decoder(msgpack.unpackb(msgpack.packb(family.encoder(msg), use_bin_type=True), raw=False))


def test_unwrap_flattens_batches_in_order_and_batched_packs_them():
    a, b, c, d = AbortBackendMsg(1), GetStatusMsg(2), ExitMsg(), AbortBackendMsg(4)
    nested = BatchBackendMsg([a, BatchBackendMsg([b, BatchBackendMsg([]), BatchBackendMsg([c])]), d])
    assert unwrap(nested) == [a, b, c, d], f"nested batches flatten depth-first, in order: {unwrap(nested)}"
    assert unwrap(c) == [c] and unwrap(BatchBackendMsg([])) == [], "one message is a list of one; an empty batch, []"
    replies = [UserReply(1, "a", False), UserReply(2, "b", True)]
    assert unwrap(BatchFrontendMsg(replies)) == replies, "front-end batches are batches too"
    columns = UserReplyBatch.pack(replies)
    assert unwrap(BatchFrontendMsg([columns, StatusReply(3, {})])) == [*replies, StatusReply(3, {})], \
        "a UserReplyBatch unwraps to its UserReplies, in order"
    status, error = StatusReply(3, {}), ErrorReply(4, "bad")
    packed = pack_replies([replies[0], status, replies[1], error])
    assert isinstance(packed[0], UserReplyBatch) and packed[1:] == [status, error], \
        f"the replies go first, as one UserReplyBatch, the rest after them in order: {packed}"
    assert unwrap(BatchFrontendMsg(packed)) == [*replies, status, error], "and unwrap gives them back"
    assert pack_replies([replies[0], status]) == [replies[0], status], "one reply alone is sent as it is"
    tokens = [DetokenizeMsg.one(1, 5), AbortMsg(1), DetokenizeMsg.one(2, 6, "length")]
    assert unwrap(BatchTokenizerMsg([tokens[0], BatchTokenizerMsg(tokens[1:])])) == tokens, "tokenizer batches too"
    assert batched([a], BatchBackendMsg) is a, "a frame of one message is the message itself"
    pair = batched([a, d], BatchBackendMsg)
    assert isinstance(pair, BatchBackendMsg) and pair.data == [a, d], f"two messages travel as a batch: {pair}"
    assert unwrap(batched(tokens, BatchTokenizerMsg)) == tokens, "packed and unwrapped: the same list"


@pytest.mark.stubs(*CODEC)
@pytest.mark.parametrize("msg", samples(), ids=lambda m: type(m).__name__)
def test_every_message_round_trips_through_msgpack(msg):
    back = through_msgpack(msg)
    assert plain(back) == plain(msg), f"{type(msg).__name__} changed on the way:\n sent {msg}\n  got {back}"


@pytest.mark.stubs(*CODEC)
def test_decoded_tensors_are_independent_writable_memory():
    msg = user_msg(1, [4, 5, 6])
    ids = through_msgpack(msg).input_ids
    ids[0] = 99  # the scheduler appends/edits token ids in place: a view of the frame's bytes would refuse
    assert ids.tolist() == [99, 5, 6] and msg.input_ids.tolist() == [4, 5, 6], "decoded ids share memory"


@pytest.mark.stubs("decode_message")
def test_a_frame_of_another_wire_version_is_refused():
    data = {"__type__": "AbortBackendMsg", "uid": 5}  # written by hand: the wire format is the contract
    for version in (WIRE_VERSION + 1, None, "1"):
        with pytest.raises(MessageError, match=f"version {version!r}"):
            BaseBackendMsg.decoder(data if version is None else {**data, "__v__": version})


@pytest.mark.stubs("encode_value")
def test_frames_are_tagged_and_versioned():
    data = BaseBackendMsg.encoder(AbortBackendMsg(5))
    assert data == {"__type__": "AbortBackendMsg", "__v__": WIRE_VERSION, "uid": 5}, f"unexpected frame map: {data}"


@pytest.mark.stubs("decode_value")
def test_decode_value_follows_the_type_hints():
    # Every field at its default (later chapters add fields: chapter 24), then the ones this test reads.
    defaults = {f.name: getattr(SamplingParams(), f.name) for f in dataclasses.fields(SamplingParams)}
    params = {"__type__": "SamplingParams", **defaults, "temperature": 1, "top_k": 5, "top_p": 0.5, "max_tokens": 3,
              "ignore_eos": False, "seed": None}
    back = decode_value(params, SamplingParams, "params")
    assert back == SamplingParams(1.0, 5, 0.5, 3, False) and type(back.temperature) is float, f"got {back}"
    assert decode_value([{"a": "b"}], list[dict[str, str]], "chat") == [{"a": "b"}]
    assert decode_value("hi", str | list[dict[str, str]], "text") == "hi"
    for data, hint in ((True, int), (1.5, int), ("3", int), (b"x", str), ([1, "2"], list[int]), (None, bool),
                       ({"a": 1}, dict[str, str]), ({**params, "__type__": "Other"}, SamplingParams)):
        with pytest.raises(MessageError, match="field"):
            decode_value(data, hint, "field")


def frame_of(msg) -> dict:
    return FAMILY[type(msg)].encoder(msg)


BAD_MAPS = {  # name -> (a map the backend decoder must refuse, a word its error must contain)
    "not a map": ([1, 2], "map"),
    "unknown tag": ({"__type__": "NoSuchMsg", "__v__": WIRE_VERSION}, "NoSuchMsg"),
    "another family's message": (lambda: frame_of(AbortMsg(1)), "AbortMsg"),
    "uid as a string": (lambda: {**frame_of(AbortBackendMsg(1)), "uid": "1"}, "uid"),
    "uid as a bool": (lambda: {**frame_of(AbortBackendMsg(1)), "uid": True}, "uid"),
    "uid as a float": (lambda: {**frame_of(AbortBackendMsg(1)), "uid": 1.0}, "uid"),
    "missing field": (lambda: {k: v for k, v in frame_of(AbortBackendMsg(1)).items() if k != "uid"}, "uid"),
    "extra field": (lambda: {**frame_of(ExitMsg()), "force": True}, "force"),
    "ids as a list": (lambda: {**frame_of(user_msg(1, [1])), "input_ids": [1]}, "input_ids"),
    "ids of float32": (lambda: {**frame_of(user_msg(1, [1])), "input_ids": {
        "__type__": "Tensor", "dtype": "float32", "buffer": b"\0" * 4}}, "input_ids"),
    "ids cut mid-value": (lambda: {**frame_of(user_msg(1, [1])), "input_ids": {
        "__type__": "Tensor", "dtype": "int32", "buffer": b"\1\0\0"}}, "input_ids"),
    "bad sampling params": (lambda: _with_params(top_p=5.0), "top_p"),
    "params of the wrong type": (lambda: _with_params(max_tokens="8"), "max_tokens"),
    "bad message inside a batch": (lambda: frame_of(BatchBackendMsg([AbortMsg(1)])), "AbortMsg"),
}


def _with_params(**change) -> dict:
    data = frame_of(user_msg(1, [1]))
    return {**data, "sampling_params": {**data["sampling_params"], **change}}


@pytest.mark.stubs(*CODEC)
@pytest.mark.parametrize("case", BAD_MAPS)
def test_a_bad_map_is_a_message_error_naming_the_problem(case):
    data, word = BAD_MAPS[case]
    data = data() if callable(data) else data
    with pytest.raises(MessageError) as err:
        BaseBackendMsg.decoder(data)
    assert word in str(err.value), f"{case}: the error should name {word!r}, it says: {err.value}"


@pytest.fixture
def addr(tmp_path):
    return f"ipc://{tmp_path}/q"


@pytest.mark.stubs("ZmqPullQueue.decode")
def test_decode_turns_bytes_that_are_not_msgpack_into_a_message_error(addr):
    pull = ZmqPullQueue(addr, create=True, decoder=BaseBackendMsg.decoder)
    try:
        for frame in (b"\xc1", b"\x93\x01", b"\x01\x02", b""):  # never-used byte, truncated, trailing bytes, empty
            with pytest.raises(MessageError, match="msgpack"):
                pull.decode(frame)
    finally:
        pull.stop()


@pytest.mark.stubs("ZmqPullQueue.get")
def test_get_with_a_timeout_returns_none_instead_of_hanging(addr):
    pull = ZmqPullQueue(addr, create=True, decoder=BaseBackendMsg.decoder)
    try:
        for timeout in (0, 0.05):
            t0 = time.perf_counter()
            assert pull.get(timeout=timeout) is None, "nothing was sent: get should return None"
            # A bound for a get that ignores its timeout or reads it in milliseconds (0.05 -> 50 s), far above any
            # pause a loaded machine gives a process.
            assert time.perf_counter() - t0 < timeout + 20.0, f"get(timeout={timeout}) waited far too long"
    finally:
        pull.stop()


@pytest.mark.stubs("ZmqPushQueue.put", "ZmqPullQueue.get", "ZmqPullQueue.decode", *CODEC)
def test_bad_frames_raise_and_the_queue_delivers_the_next_message(addr):
    good = msgpack.packb(frame_of(AbortBackendMsg(7)), use_bin_type=True)
    bad_frames = {
        "garbage bytes": (b"\xc1\xc1 not msgpack", "msgpack"),
        "truncated frame": (good[:-2], "msgpack"),
        "trailing bytes": (good + b"\x00", "msgpack"),
        "unknown tag": (msgpack.packb({"__type__": "Nope", "__v__": WIRE_VERSION}), "Nope"),
        "wrong field type": (msgpack.packb({**frame_of(AbortBackendMsg(1)), "uid": "one"}), "uid"),
        "empty frame": (b"", "msgpack"),
    }
    pull = ZmqPullQueue(addr, create=True, decoder=BaseBackendMsg.decoder)
    push = ZmqPushQueue(addr, create=False, encoder=BaseBackendMsg.encoder)
    raw = push.socket  # the queue's own socket sends the hand-made bad frames, in order with the good ones
    try:
        for i, (name, (frame, word)) in enumerate(bad_frames.items()):
            raw.send(frame)
            push.put(AbortBackendMsg(i))
            with pytest.raises(MessageError) as err:
                pull.get(timeout=30)
            assert word in str(err.value), f"{name}: the error should name {word!r}, it says: {err.value}"
            after = pull.get(timeout=30)
            assert plain(after) == plain(AbortBackendMsg(i)), f"after the {name}, the next message was {after}"
        assert pull.empty(), "a bad frame was delivered twice or left behind"
    finally:
        push.stop()
        pull.stop()


def echo(inbox: str, outbox: str, count: int) -> None:
    """Child process: decode `count` messages and send each back re-encoded."""
    pull = ZmqPullQueue(inbox, create=True, decoder=lambda data: decode_message(data, ANY_MSG))
    push = ZmqPushQueue(outbox, create=False, encoder=encode_message)
    try:
        for _ in range(count):
            msg = pull.get(timeout=30)
            if msg is None:
                raise SystemExit("echo: nothing came for 30 s")
            push.put(msg)
    finally:
        push.stop()
        pull.stop()


@pytest.mark.stubs("ZmqPushQueue.put", "ZmqPullQueue.get", "ZmqPullQueue.decode", *CODEC)
def test_every_message_crosses_to_another_process_and_back(tmp_path):
    to_child, from_child = f"ipc://{tmp_path}/in", f"ipc://{tmp_path}/out"
    # The parent's PUSH connects: a connecting socket queues messages until the child has bound its end (a bound
    # PUSH with no peer would block in send, and hang this test if the child died).
    push = ZmqPushQueue(to_child, create=False, encoder=encode_message)
    pull = ZmqPullQueue(from_child, create=True, decoder=lambda data: decode_message(data, ANY_MSG))
    sent = samples()
    child = multiprocessing.get_context("spawn").Process(target=echo, args=(to_child, from_child, len(sent)),
                                                         daemon=True)
    child.start()
    try:
        for msg in sent:
            push.put(msg)
        for i, msg in enumerate(sent):
            back = pull.get(timeout=30)
            assert back is not None, f"message {i} ({type(msg).__name__}) never came back (child {child.exitcode=})"
            assert plain(back) == plain(msg), f"message {i} changed on the round trip:\n sent {msg}\n  got {back}"
        child.join(timeout=30)
        assert child.exitcode == 0, f"the echo process ended with exit code {child.exitcode}"
    finally:
        if child.is_alive():
            child.terminate()
        child.join(timeout=10)
        push.stop()
        pull.stop()
    assert not child.is_alive(), "the child process is still running"
