"""Chapter 15 example: the OpenAI-compatible server on SmolLM2, driven with the official openai client: a chat
answer (checked against the same engine run offline), a streamed completion, a stop string, an unsupported
parameter answered with an OpenAI error, then Ctrl-C (SIGINT) stopping every process."""

import signal
import sys

from openai import BadRequestError, OpenAI

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.server.local import LocalServer
from tools.models import model_path_from_env

LIMITS = ["--max-running-reqs", "4", "--max-seq-len", "256", "--cpu-kv-cache-mb", "32"]


def main() -> int:
    path = str(model_path_from_env("smollm2"))
    server = LocalServer(path, *LIMITS)  # on a free port; back once /health answers
    try:
        client = OpenAI(base_url=server.url + "/v1", api_key="none")
        print("models:", [m.id for m in client.models.list()])

        question = "What is the capital of France?"
        chat = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": question}],
                                              max_tokens=24, temperature=0)
        answer = chat.choices[0].message.content
        print(f"\nchat: {question!r} -> {answer!r}\n  finish_reason={chat.choices[0].finish_reason}, "
              f"usage={chat.usage.prompt_tokens}+{chat.usage.completion_tokens}")

        print("\nstreamed completion, one piece per event:")
        pieces = []
        for chunk in client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=16,
                                               temperature=0, stream=True):
            pieces.append(chunk.choices[0].text)
        print("  " + " | ".join(repr(p) for p in pieces if p))

        stopped = client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=16, temperature=0,
                                            stop=[" was"])
        print(f"\nwith stop=[' was']: {stopped.choices[0].text!r} (finish_reason={stopped.choices[0].finish_reason})")
        try:
            client.completions.create(model="smollm2", prompt="hi", n=2)
        except BadRequestError as e:
            print(f"\nn=2 -> HTTP {e.status_code}: {e.body}")
    finally:
        code = server.stop(signal.SIGINT)  # what Ctrl-C sends
    print(f"\nafter Ctrl-C the server exited with code {code}")

    llm = LLM(path, max_running_reqs=1, max_seq_len=256)
    ids = llm.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
    offline = llm.generate([ids], SamplingParams(max_tokens=24))[0]["text"]
    same = offline == answer and "".join(pieces).startswith(stopped.choices[0].text)
    print(f"the chat answer equals the offline engine's: {offline == answer}")
    return 0 if same and code == 0 and not server.left_behind else 1


if __name__ == "__main__":
    sys.exit(main())
