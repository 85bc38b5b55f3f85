"""Chapter 13 example: a SmolLM2 generation streamed through the incremental detokenizer, token by token next to
naive per-token decoding; the pieces add up to the full decode; then the same tokens cut at a stop string."""

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.tokenizer import IncrementalDetokenizer, TokenizeManager
from tools.models import model_path_from_env

llm = LLM(model_path_from_env("smollm2"), max_running_reqs=1, max_seq_len=256)
tok = llm.tokenizer
question = "How do you say 'thank you' in Chinese and Japanese?"
prompt = TokenizeManager(tok, max_prompt_len=200).tokenize([{"role": "user", "content": question}])
stream = IncrementalDetokenizer(tok, stop_token_ids=[tok.eos_token_id])
steps = []  # (token id, what the stream handed out at that token)
llm.scheduler.on_token = lambda req, token: steps.append((token, stream.step(token)))
ids = llm.generate([prompt], SamplingParams(max_tokens=40))[0]["token_ids"]
steps.append(("end", stream.finish()))
full = tok.decode(ids, skip_special_tokens=True)
pieces = [p for _, p in steps]

print(f"prompt: {question!r} ({len(prompt)} tokens with the chat template)\n")
print(f"{'step':>4}  {'token':>6}  {'decoded alone':<16} piece handed out")
split = [k for k, (t, _) in enumerate(steps[:-1]) if "\ufffd" in tok.decode([t])]
show = sorted(set(range(6)) | {k + d for k in split for d in (-1, 0, 1)} | {len(steps) - 1})
for k in show:
    token, piece = steps[k]
    alone = "" if token == "end" else tok.decode([token])
    print(f"{k:>4}  {token:>6}  {alone!r:<16} {piece!r}")
print(f"\n{len(split)} tokens decode to part of a character; naive per-token decoding shows "
      f"{sum(tok.decode([t]).count(chr(0xFFFD)) for t in ids)} U+FFFD, the pieces show "
      f"{sum(p.count(chr(0xFFFD)) for p in pieces)}")
print(f"streamed: {''.join(pieces)!r}")
ok = "".join(pieces) == full and "\ufffd" not in "".join(pieces)
print(f"pieces add up to the full decode: {''.join(pieces) == full}")

stop = "thank you" if "thank you" in full else full[len(full) // 2:len(full) // 2 + 8]
cut = IncrementalDetokenizer(tok, stop=[stop])
cut_pieces = []
for token in ids:
    cut_pieces.append(cut.step(token))
    if cut.finished:
        break
want = full[:full.find(stop)]
print(f"\nwith stop={stop!r}: stopped after {len(cut_pieces)} of {len(ids)} tokens, matched {cut.matched_stop!r}")
print(f"  last pieces: {cut_pieces[-4:]}")
print(f"  text: {''.join(cut_pieces)!r}")
print(f"  equals the full text cut before the first {stop!r}: {''.join(cut_pieces) == want}")
ok = ok and "".join(cut_pieces) == want and cut.matched_stop == stop
raise SystemExit(0 if ok else 1)
