"""Chapter 12 example: two processes and ZMQ. The parent (the tokenizer's side) sends a batch of user requests
and a garbage frame to a child (the scheduler's side), which describes what arrived, survives the bad frame,
and answers with replies; the parent checks every description and prints the encoded sizes."""

import multiprocessing
import pickle
import sys
import tempfile

import msgpack
import torch
from tokenizers import Tokenizer

from minisgl.core import SamplingParams
from minisgl.message import (BaseBackendMsg, BaseFrontendMsg, BatchBackendMsg, BatchFrontendMsg, ExitMsg,
                             MessageError, UserMsg, UserReply, unwrap)
from minisgl.utils.mp import ZmqPullQueue, ZmqPushQueue
from tools.models import model_path_from_env


def describe(msg: UserMsg) -> str:
    p = msg.sampling_params
    return (f"uid {msg.uid}: {len(msg.input_ids)} {str(msg.input_ids.dtype)[6:]} ids {msg.input_ids[:4].tolist()}..."
            f" max_tokens={p.max_tokens} temperature={p.temperature}")


def scheduler_side(inbox: str, outbox: str) -> None:
    """The child: receive until ExitMsg; a bad frame is reported back, and the loop goes on."""
    pull = ZmqPullQueue(inbox, create=True, decoder=BaseBackendMsg.decoder)
    push = ZmqPushQueue(outbox, create=False, encoder=BaseFrontendMsg.encoder)
    try:
        while True:
            try:
                msg = pull.get(timeout=30)
            except MessageError as e:
                push.put(UserReply(-1, f"refused a frame: {e}", False))
                continue
            if msg is None or isinstance(msg, ExitMsg):
                break
            push.put(BatchFrontendMsg([UserReply(r.uid, describe(r), True) for r in unwrap(msg)]))
    finally:
        push.stop()
        pull.stop()


def main() -> int:
    tokenizer = Tokenizer.from_file(str(model_path_from_env("smollm2") / "tokenizer.json"))
    prompts = ["What is the capital of France?", "Name a primary color.", "Write a haiku about message queues."]
    batch = BatchBackendMsg([
        UserMsg(uid, torch.tensor(tokenizer.encode(text).ids, dtype=torch.int32),
                SamplingParams(max_tokens=8 * (uid + 1), temperature=0.5 * uid))
        for uid, text in enumerate(prompts)])

    with tempfile.TemporaryDirectory() as tmp:
        inbox, outbox = f"ipc://{tmp}/scheduler", f"ipc://{tmp}/frontend"
        # the sending side connects: its messages wait in ZMQ until the child has bound the address
        push = ZmqPushQueue(inbox, create=False, encoder=BaseBackendMsg.encoder)
        pull = ZmqPullQueue(outbox, create=True, decoder=BaseFrontendMsg.decoder)
        child = multiprocessing.get_context("spawn").Process(target=scheduler_side, args=(inbox, outbox))
        child.start()
        try:
            push.socket.send(b"\x93\x01\x02")  # a truncated msgpack array: the child must survive it
            push.put(batch)
            push.put(ExitMsg())
            refused, replies = pull.get(timeout=60), pull.get(timeout=60)
            child.join(timeout=30)
        finally:
            if child.is_alive():
                child.terminate()
                child.join()
            push.stop()
            pull.stop()

    ok = refused is not None and refused.uid == -1 and replies is not None and child.exitcode == 0
    print(f"child, on the bad frame: {refused.incremental_output if refused else 'NO REPLY'}")
    for msg, reply in zip(batch.data, replies.data if replies else []):
        same = reply.uid == msg.uid and reply.incremental_output == describe(msg)
        ok &= same
        print(f"child got {reply.incremental_output}  [{'matches' if same else 'DIFFERS from'} what was sent]")
    ok &= replies is not None and len(replies.data) == len(batch.data)

    print("\nencoded sizes (bytes):")
    for msg in batch.data:
        frame = msgpack.packb(BaseBackendMsg.encoder(msg), use_bin_type=True)
        as_list = len(msgpack.packb(msg.input_ids.tolist()))
        pickled = len(pickle.dumps(msg))
        print(f"  uid {msg.uid}: frame {len(frame):4d} | its {len(msg.input_ids)} ids: raw bytes"
              f" {4 * len(msg.input_ids):3d}, msgpack list {as_list:3d} | pickle of the message {pickled:4d}")
    print(f"  the whole batch: {len(msgpack.packb(BaseBackendMsg.encoder(batch), use_bin_type=True))}")
    print(f"\nchild exit code {child.exitcode}; everything arrived intact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
