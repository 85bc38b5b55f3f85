"""Chapter 1 example: follow one request's length bookkeeping through prefill and decode."""

import torch

from minisgl.core import Batch, Context, Req, SamplingParams

prompt = torch.tensor([101, 7, 42, 42, 9, 13], dtype=torch.int32)
req = Req(prompt, table_idx=0, cached_len=0, output_len=4, uid=0, sampling_params=SamplingParams(max_tokens=4))

print(f"prompt of {len(prompt)} tokens, max_tokens=4\n")
print(f"{'step':<10}{'cached_len':>11}{'device_len':>11}{'extend_len':>11}{'remain_len':>11}  tokens on host")
fake_tokens = iter([500, 501, 502, 503])
step = "admitted"
while True:
    print(f"{step:<10}{req.cached_len:>11}{req.device_len:>11}{req.extend_len:>11}{req.remain_len:>11}  "
          f"{req.input_ids.tolist()}")
    if not req.can_decode:
        break
    phase = "prefill" if req.cached_len == 0 else "decode"
    ctx = Context()
    with ctx.forward_batch(Batch([req], phase)) as batch:  # a model would run here
        assert ctx.batch is batch
    req.complete_one()
    req.append_host(next(fake_tokens))
    step = phase

print(f"\ngenerated {req.output_ids}; the last token's KV was never computed: cached_len={req.cached_len} "
      f"< device_len={req.device_len}")
