"""Chapter 27 example: the chat workload routed over 2 workers by round robin and by the cache-aware policy, as a
router would place it (no engine, no router process: the policy model of minisgl/router). The turns go out round
by round (every conversation's first turn, then every second turn, ...), and a request is answered once two more
were sent, so loads stay small and even, as they do when the workers keep up. For each policy: which worker took each turn of
the first conversations, each worker's share of the requests, and the share of every prompt that its worker's
approximate tree already held (what a prefix cache there would skip)."""

from minisgl.router import CacheAwarePolicy, RoundRobinPolicy, chat_workload, interleave

workload = chat_workload(conversations=7, turns=4, system_prompts=2, system_words=80, answer_words=40, seed=0)
turns = interleave(workload)
print(f"{len(workload)} conversations x {len(workload[0])} turns over 2 system prompts: {len(turns)} requests, "
      f"prompts of {min(len(t.prompt) for t in turns)}-{max(len(t.prompt) for t in turns)} characters")

for name, policy in (("round robin", RoundRobinPolicy(["w0", "w1"])), ("cache-aware", CacheAwarePolicy(["w0", "w1"]))):
    shadow = CacheAwarePolicy(["w0", "w1"])  # its trees record where each text went, whatever the policy
    placed, held, total, inflight = {}, 0, 0, []
    for turn in turns:
        worker = policy.select(turn.prompt)
        held += shadow.trees[worker].match(turn.prompt)[0]
        total += len(turn.prompt)
        shadow.trees[worker].insert(turn.prompt, shadow.epoch)
        shadow.epoch += 1
        placed[(turn.conversation, turn.turn)] = worker
        inflight.append(worker)
        if len(inflight) > 2:
            policy.finish(inflight.pop(0))
    print(f"\n== {name}")
    for c in range(4):
        print(f"   conversation {c} (system prompt {workload[c][0].system}): turns on workers "
              + " ".join(f"w{placed[(c, t)]}" for t in range(len(workload[c]))))
    shares = [sum(w == i for w in placed.values()) for i in range(2)]
    print(f"   requests per worker: w0 {shares[0]}, w1 {shares[1]}")
    print(f"   prompt characters its worker already held: {held / total:.1%}")
