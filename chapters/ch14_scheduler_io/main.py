"""Chapter 14 example: the scheduler and the tokenizer as two processes. This process plays the front end: it
sends three chat prompts as TokenizeMsg, prints the streamed pieces as they arrive, aborts a long request while it
runs, and checks the texts against the same engine run offline (LLM.generate)."""

import sys
import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.message import AbortMsg, GetStatusMsg, StatusReply, TokenizeMsg, UserReply, unwrap
from minisgl.scheduler.config import SchedulerConfig
from minisgl.server.launch import Workers
from tools.models import model_path_from_env

QUESTIONS = ["What is the capital of France?", "Name two planets.", "Tell me a long story about a dragon."]
ENGINE = dict(max_running_reqs=4, max_seq_len=256, cpu_kv_cache_mb=32)


def main() -> int:
    path = model_path_from_env("smollm2")
    started = time.perf_counter()
    with Workers(path, ENGINE, SchedulerConfig(max_extend_tokens=64)) as workers:
        print(f"workers ready in {time.perf_counter() - started:.1f} s: {sorted(workers.processes)}; "
              f"max_seq_len {workers.max_seq_len}, {workers.total_slots} KV slots\n")
        for uid, q in enumerate(QUESTIONS):
            params = SamplingParams(max_tokens=24 if uid < 2 else 200, ignore_eos=uid == 2)
            workers.to_tokenizer.put(TokenizeMsg(uid, [{"role": "user", "content": q}], params))
        texts, ends, pieces = {}, {}, 0
        while len(ends) < len(QUESTIONS):
            msg = workers.replies.get(timeout=60)
            if msg is None:
                print(f"no reply in 60 s: {workers.dead_worker()}")
                return 1
            for r in unwrap(msg):
                assert isinstance(r, UserReply), r
                texts[r.uid] = texts.get(r.uid, "") + r.incremental_output
                pieces += 1
                if pieces <= 12:
                    print(f"  uid {r.uid}: {r.incremental_output!r}")
                if r.uid == 2 and r.completion_tokens == 10:
                    workers.to_tokenizer.put(AbortMsg(2))  # the dragon story is long enough
                if r.finished:
                    ends[r.uid] = r
        print(f"  ... {pieces} pieces in all\n")
        for uid, r in sorted(ends.items()):
            print(f"uid {uid} [{r.finish_reason}, {r.prompt_tokens} + {r.completion_tokens} tokens]: {texts[uid]!r}")
        time.sleep(0.5)  # the abort reaches the scheduler
        workers.to_scheduler.put(GetStatusMsg(99))
        status = next(r for r in unwrap(workers.replies.get(timeout=30)) if isinstance(r, StatusReply)).status
        print(f"\nscheduler status after the abort: {status}")

    llm = LLM(path, **ENGINE)
    chats = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False) for q in QUESTIONS[:2]]
    offline = llm.generate(chats, SamplingParams(max_tokens=24))
    same = all(texts[uid] == out["text"] for uid, out in enumerate(offline))
    freed = status["available_slots"] == status["total_slots"] and status["running"] == 0
    print(f"streamed texts equal the offline run: {same}; every KV slot free after the abort: {freed}; "
          f"finish reasons {[ends[u].finish_reason for u in range(3)]}")
    return 0 if same and freed and ends[2].finish_reason == "abort" else 1


if __name__ == "__main__":
    sys.exit(main())
