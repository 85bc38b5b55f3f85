def demote(leaves: list, need: int, policy: str, host_free: int) -> dict:
    """Evict device leaves, least recently used first, until `need` tokens are freed; each goes to the host or is
    dropped. leaves: [(name, tokens, last_access, backed_up)]; policy "write_through" or "write_back"; host_free: host
    tokens free for new copies. Returns {"evicted": [(name, fate)], "freed", "host_free"}."""
    raise NotImplementedError
