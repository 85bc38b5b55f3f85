"""CPU probe for chapters 12-15: what one scheduler step's replies cost on the wire, per output token.

    PYTHONPATH=$(python -m tools.course tree 26 --sol):. python -m benchmark.probes.reply_probe --batch 256

A step of `--batch` requests, one token each, crosses two sockets on its way to the clients: scheduler -> tokenizer
process (a DetokenizeMsg) and tokenizer process -> front end (the replies). For each hop it times the sender's
encoding (msgpack included) and the receiver's decoding, in microseconds of CPU per token, in two shapes:

- arrays: what the server sends, one DetokenizeMsg of lists and one UserReplyBatch of columns per step;
- objects: one tagged message per token, as a BatchFrontendMsg of UserReply objects travels (the shape every hop
  had before the replies became arrays).

Pure CPU and no model: it runs anywhere and measures only the messages, not the detokenizing or the HTTP events
(bench-serve's per-process CPU accounting shows those).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import msgpack

from minisgl.message import (BaseFrontendMsg, BaseTokenizerMsg, BatchFrontendMsg, DetokenizeMsg, UserReply,
                             UserReplyBatch, unwrap)


def per_token_us(fn, tokens: int, seconds: float = 0.5) -> float:
    """CPU microseconds per token of `fn` (one step), repeated for about `seconds`."""
    fn()
    runs, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        fn()
        runs += 1
    return 1e6 * (time.process_time() - start) / runs / tokens


def hop(name: str, family: type, make, tokens: int, receive=lambda m: m) -> dict:
    """Encode (`make` the message from what the sender holds, map, msgpack) and decode (msgpack, map, what the
    receiver does with it) of one step's message."""
    frame = msgpack.packb(family.encoder(make()), use_bin_type=True)

    def encode():
        msgpack.packb(family.encoder(make()), use_bin_type=True)

    def decode():
        receive(family.decoder(msgpack.unpackb(frame, raw=False, strict_map_key=False)))

    return {"hop": name, "encode_us": per_token_us(encode, tokens), "decode_us": per_token_us(decode, tokens),
            "bytes_per_token": len(frame) / tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256, help="requests in the step, one token each (default 256)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    args = ap.parse_args()
    n = args.batch
    finished = {i: "length" for i in range(0, n, 50)}  # a few requests end in this step
    step = DetokenizeMsg(list(range(n)), [1000 + i for i in range(n)], [finished.get(i, "") for i in range(n)])
    replies = [UserReply(i, " word", i in finished, finished.get(i), 300, 40) for i in range(n)]
    rows = [
        hop("scheduler -> tokenizer, arrays", BaseTokenizerMsg, lambda: step, n),
        hop("tokenizer -> front end, arrays", BaseFrontendMsg, lambda: UserReplyBatch.pack(replies), n, unwrap),
        hop("tokenizer -> front end, objects", BaseFrontendMsg, lambda: BatchFrontendMsg(replies), n, unwrap),
    ]
    print(f"one step of {n} tokens, CPU us per token:")
    for r in rows:
        print(f"  {r['hop']:<34} encode {r['encode_us']:5.2f}  decode {r['decode_us']:5.2f}  "
              f"{r['bytes_per_token']:5.1f} bytes/token")
    if args.out is not None:
        args.out.write_text(json.dumps({"batch": n, "hops": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
