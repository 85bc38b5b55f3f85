"""The wire format of every message: a tagged, versioned map that msgpack can carry.

A message becomes a map {"__type__": class name, "__v__": WIRE_VERSION, field: value, ...}. Field values are
msgpack's own types (int, float, str, bool, None, bytes, lists, maps); a nested dataclass (SamplingParams, the
messages of a batch) is a tagged map too, and a 1-D tensor of token ids is {"__type__": "Tensor", "dtype": ...,
"buffer": raw little-endian bytes}. Decoding is guided by the receiving class's type hints, so a frame that is
not what the receiver expects fails with a MessageError naming the field, never with a stray exception.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Union

import numpy as np
import torch

WIRE_VERSION = 1  # bump when a message's fields change meaning; a receiver refuses other versions
TAG, VERSION = "__type__", "__v__"
# Token ids travel as raw bytes; the dtype name says how to read them back (always little-endian).
TENSOR_DTYPES = {"int32": (torch.int32, "<i4"), "int64": (torch.int64, "<i8")}
PLAIN_TYPES = frozenset({bool, int, float, str, bytes})  # msgpack's own scalars: a hint they match exactly


class MessageError(ValueError):
    """A frame that cannot become the expected message: bad bytes, unknown tag, wrong version or field."""


def encode_message(msg: Any) -> dict:
    """The top-level map of one message: its tagged fields plus the wire version."""
    return {**encode_value(msg), VERSION: WIRE_VERSION}


def decode_message(data: Any, expected: Any) -> Any:
    """The message a received map describes. `expected` is the family base class (or a union of them)
    the receiver accepts; anything else raises MessageError."""
    # TODO(ch12): check that `data` is a map and carries this build's WIRE_VERSION (a MessageError naming what
    #   came instead), then decode the rest of the map (without the version) as `expected`.
    # >>> solution
    if not isinstance(data, dict):
        raise MessageError(f"a message is a map, got {type(data).__name__}")
    if data.get(VERSION) != WIRE_VERSION:
        raise MessageError(f"wire version {data.get(VERSION)!r}, this build speaks version {WIRE_VERSION}")
    body = {k: v for k, v in data.items() if k != VERSION}
    return decode_value(body, expected, where="message")
    # <<< solution


def encode_value(value: Any) -> Any:
    """`value` as msgpack's types: dataclasses and tensors become tagged maps, lists and maps are walked."""
    # TODO(ch12): plain values (None, bool, int, float, str, bytes) pass as they are; a torch.Tensor becomes
    #   _encode_tensor(value); a dataclass becomes {TAG: its class name, field: encoded value, ...}; lists and
    #   tuples become lists (a list of plain values as it is: no call per item) and maps become maps of encoded
    #   values; anything else is a MessageError.
    # >>> solution
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {name: encode_value(getattr(value, name)) for name in _field_names(type(value))}
        return {TAG: type(value).__name__, **fields}
    if isinstance(value, (list, tuple)):
        if all(type(v) in PLAIN_TYPES for v in value):  # token ids, texts: msgpack packs the list as it is
            return value if type(value) is list else list(value)
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {k: encode_value(v) for k, v in value.items()}
    raise MessageError(f"cannot encode a {type(value).__name__}")
    # <<< solution


def _encode_tensor(t: torch.Tensor) -> dict:
    name = str(t.dtype).removeprefix("torch.")
    if t.dim() != 1 or name not in TENSOR_DTYPES:
        raise MessageError(f"only 1-D int32/int64 tensors travel, got {t.dim()}-D {name}")
    raw = t.detach().cpu().numpy().astype(TENSOR_DTYPES[name][1], copy=False).tobytes()
    return {TAG: "Tensor", "dtype": name, "buffer": raw}


def _decode_tensor(data: Any, where: str) -> torch.Tensor:
    if not isinstance(data, dict) or data.get(TAG) != "Tensor":
        raise MessageError(f"{where}: expected a tensor, got {_describe(data)}")
    dtype, buffer = data.get("dtype"), data.get("buffer")
    if dtype not in TENSOR_DTYPES or not isinstance(buffer, bytes):
        raise MessageError(f"{where}: a tensor needs a dtype in {sorted(TENSOR_DTYPES)} and bytes, got {dtype!r}")
    torch_dtype, wire_dtype = TENSOR_DTYPES[dtype]
    if len(buffer) % np.dtype(wire_dtype).itemsize:
        raise MessageError(f"{where}: {len(buffer)} bytes is not a whole number of {dtype} values")
    # frombuffer views the frame's read-only bytes: copy into memory the tensor owns
    values = np.frombuffer(buffer, dtype=wire_dtype).astype(wire_dtype[1:], copy=True)
    return torch.from_numpy(values).to(torch_dtype)


def decode_value(data: Any, hint: Any, where: str) -> Any:
    """`data` read back as type `hint` (a class, list[X], dict[K, V] or a union); `where` names the field
    for the error message."""
    # TODO(ch12): decode by the hint: a union tries each arm; torch.Tensor -> _decode_tensor; a dataclass ->
    #   _decode_dataclass; list[X] / dict[K, V] decode every item (a list whose items all are exactly the plain
    #   type X passes in one pass: a step's token ids); a plain type (int, float, str, bool, bytes,
    #   None) must match exactly (a bool is not an int; an int may stand for a float). Anything that does not
    #   fit raises MessageError naming `where`, what was expected and what came (use _describe).
    # >>> solution
    if type(data) is hint and hint in PLAIN_TYPES:  # the common case first: a plain value of the hinted type
        return data
    origin, args = _hint_parts(hint)
    if origin in (Union, types.UnionType):
        return _decode_union(data, args, where)
    if hint is torch.Tensor:
        return _decode_tensor(data, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_dataclass(data, hint, where)
    if origin in (list, tuple) and isinstance(data, list):
        if args[0] in PLAIN_TYPES and all(type(item) is args[0] for item in data):  # one pass, no call per item
            return data
        return [decode_value(item, args[0], f"{where}[{i}]") for i, item in enumerate(data)]
    if origin is dict and isinstance(data, dict):
        return {decode_value(k, args[0], f"{where} key"): decode_value(v, args[1], f"{where}[{k!r}]")
                for k, v in data.items()}
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if hint in (None, type(None)) and data is None:
        return None
    if isinstance(hint, type) and type(data) is hint:
        return data
    raise MessageError(f"{where}: expected {_hint_name(hint)}, got {_describe(data)}")
    # <<< solution


def _decode_union(data: Any, arms: tuple, where: str) -> Any:
    if type(data) in arms and (data is None or type(data) in PLAIN_TYPES):  # `str | None` given a str or None
        return data
    errors = []
    for arm in arms:
        try:
            return decode_value(data, arm, where)
        except MessageError as e:
            errors.append(str(e))
    raise MessageError(" / ".join(errors))


def _decode_dataclass(data: Any, cls: type, where: str) -> Any:
    """A tagged map as `cls` or one of its subclasses (the tag picks which): every field present, no extra."""
    if not isinstance(data, dict) or not isinstance(data.get(TAG), str):
        raise MessageError(f"{where}: expected a tagged {cls.__name__} map, got {_describe(data)}")
    tag, known = data[TAG], _tagged_classes(cls)
    if tag not in known:
        raise MessageError(f"{where}: unknown message type {tag!r}, expected one of {sorted(known)}")
    target = known[tag]
    fields, keys = _decoding_plan(target)
    if data.keys() != keys:
        hints = _field_hints(target)
        given = data.keys() - {TAG}
        missing, extra = sorted(hints.keys() - given), sorted(map(str, given - hints.keys()))
        problems = [f"missing {missing}"] * bool(missing) + [f"unexpected {extra}"] * bool(extra)
        raise MessageError(f"{where}: {tag} fields wrong: {', '.join(problems)}")
    kwargs = {name: decode_value(data[name], hint, field_where) for name, hint, field_where in fields}
    try:
        return target(**kwargs)
    except (TypeError, ValueError) as e:  # the class's own validation (SamplingParams.validate)
        raise MessageError(f"{where}: {tag} refused its fields: {e}") from None


@functools.cache
def _tagged_classes(cls: type) -> dict[str, type]:
    """The classes a map of type `cls` may be, by tag: the leaves of the class tree under it (a family's base
    class is never sent itself; it stands for any message of the family)."""
    below = cls.__subclasses__()
    if not below:
        return {cls.__name__: cls} if dataclasses.is_dataclass(cls) else {}
    return {tag: c for sub in below for tag, c in _tagged_classes(sub).items()}


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


@functools.cache
def _decoding_plan(cls: type) -> tuple[tuple[tuple[str, Any, str], ...], frozenset[str]]:
    """Worked out once per class: (field, hint, its name in an error message) for every field, and the keys a map
    of this class has (its fields and the tag)."""
    hints = _field_hints(cls)
    return tuple((name, hint, f"{cls.__name__}.{name}") for name, hint in hints.items()), frozenset(hints) | {TAG}


@functools.cache
def _hint_parts(hint: Any) -> tuple[Any, tuple]:
    """typing.get_origin and get_args of a hint, asked once per hint (list[int] -> (list, (int,)))."""
    return typing.get_origin(hint), typing.get_args(hint)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _describe(data: Any) -> str:
    text = repr(data)
    return f"{type(data).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
