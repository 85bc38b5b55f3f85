class LRUTree:
    """Prefix-cache tree with lock counts and LRU eviction of unlocked leaves. Node 0 is the root."""

    def __init__(self) -> None:
        raise NotImplementedError

    def add(self, node: int, parent: int, num_tokens: int, time: int) -> None:
        """Add a new leaf `node` under `parent` holding num_tokens tokens, last accessed at `time`."""
        raise NotImplementedError

    def access(self, node: int, time: int) -> None:
        """Set the last-access time of node and all its ancestors."""
        raise NotImplementedError

    def lock(self, node: int) -> None:
        """+1 on the lock count of node and all its ancestors."""
        raise NotImplementedError

    def unlock(self, node: int) -> None:
        """-1 on the lock count of node and all its ancestors; ValueError (no change) if one would go negative."""
        raise NotImplementedError

    def evictable_tokens(self) -> int:
        """Tokens held by non-root nodes whose lock count is 0."""
        raise NotImplementedError

    def evict(self, n: int) -> list[int]:
        """Remove unlocked leaves in (time, id) order until >= n tokens are freed or none is left."""
        raise NotImplementedError
