"""Chapter 29 example: three chat questions answered by two engines, each in a process of its own: a prefill engine
(a child process) computes each prompt's KV and first token and sends the KV over gloo; the decode engine (this
process) receives it into pages of its own and generates the rest. The answers are checked against one ordinary
engine running the same requests."""

import multiprocessing as mp
import socket

import torch
from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.disagg import DecodeScheduler, KVChannel, PrefillScheduler
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.scheduler.config import SchedulerConfig
from minisgl.scheduler.utils import PendingReq
from tools.models import model_path_from_env

MAX_TOKENS = 24
QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "What does a CPU do?"]
ENGINE = dict(device="cpu", dtype="float32", max_seq_len=256, num_pages=512)


def prefill_side(path: str, port: int, prompts: list[list[int]], done, leave) -> None:
    torch.set_num_threads(1)
    sched = PrefillScheduler(Engine(EngineConfig(path, **ENGINE)), SchedulerConfig(overlap=False),
                             KVChannel("prefill", "127.0.0.1", port))
    for uid, ids in enumerate(prompts):
        sched.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=MAX_TOKENS)),
                          room=100 + uid)
    sched.run_until_idle()
    while sched.parked:  # hold the pages until the decode side confirms each transfer
        sched.poll()
    sched.check_integrity()
    done.put(sched.status())
    leave.wait()  # the store lives in this process: stay until the decode side is done with it


if __name__ == "__main__":
    path = model_path_from_env("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False) for q in QUESTIONS]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    done, leave = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=prefill_side, args=(path, port, prompts, done, leave))
    child.start()

    engine = Engine(EngineConfig(path, **ENGINE))
    decode = DecodeScheduler(engine, SchedulerConfig(overlap=False), KVChannel("decode", "127.0.0.1", port))
    for uid, ids in enumerate(prompts):
        decode.add_request(PendingReq(uid, torch.tensor(ids, dtype=torch.int32), SamplingParams(max_tokens=MAX_TOKENS)),
                           room=100 + uid)
    answers = {}
    while len(answers) < len(prompts):
        decode.step()  # takes the transfers that have arrived, then decodes
        answers |= {uid: decode.take_finished(uid) for uid in list(decode.finished)}
    prefill_status = done.get(timeout=300)
    leave.set()
    child.join()
    decode.check_integrity()

    kv = engine.kv_cache
    per_token = 2 * kv.num_layers * kv.num_kv_heads * kv.head_dim * 4  # bytes, float32
    one = LLM(path, **{k: v for k, v in ENGINE.items() if k != "device"}, overlap=False)
    want = one.generate([list(p) for p in prompts], SamplingParams(max_tokens=MAX_TOKENS))
    print(f"prefill engine (a child process) -> decode engine (this process) over gloo; "
          f"{kv.num_layers} layers x {kv.num_kv_heads} KV heads x {kv.head_dim}: {per_token:,} bytes of KV per token\n")
    for uid, q in enumerate(QUESTIONS):
        req = answers[uid]
        out = req.output_ids
        same = out == want[uid]["token_ids"]
        print(f"[{uid}] {q}\n    prompt {len(prompts[uid])} tokens, {len(prompts[uid]) * per_token:,} bytes sent; "
              f"first token {tokenizer.decode(out[:1])!r} from the prefill engine")
        print(f"    answer: {tokenizer.decode(out, skip_special_tokens=True)!r} ({req.finish_reason})")
        print(f"    same tokens as one engine: {same}")
    print(f"\nprefill side after the transfers: {prefill_status['transfers_parked']} parked, "
          f"{prefill_status['available_slots']} of {prefill_status['total_slots']} slots available")
    print(f"decode side: {decode.transfers} transfers received; integrity checked on both sides")
