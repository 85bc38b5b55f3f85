POLICIES = ("write_through", "write_back")


def demote(leaves: list, need: int, policy: str, host_free: int) -> dict:
    """Evict device leaves, least recently used first, until `need` tokens are freed; each goes to the host or is
    dropped. leaves: [(name, tokens, last_access, backed_up)]; policy "write_through" or "write_back"; host_free: host
    tokens free for new copies. Returns {"evicted": [(name, fate)], "freed", "host_free"}."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if need > sum(tokens for _, tokens, _, _ in leaves):
        raise ValueError(f"the leaves cannot free {need} tokens")
    order = sorted(range(len(leaves)), key=lambda i: (leaves[i][2], i))  # stable: equal times keep their order
    evicted, freed = [], 0
    for i in order:
        if freed >= need:
            break
        name, tokens, _, backed_up = leaves[i]
        if not backed_up and policy == "write_back" and tokens <= host_free:
            host_free -= tokens
            backed_up = True
        evicted.append((name, "host" if backed_up else "dropped"))
        freed += tokens
    return {"evicted": evicted, "freed": freed, "host_free": host_free}
