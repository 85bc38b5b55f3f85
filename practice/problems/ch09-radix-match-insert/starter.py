class RadixTree:
    """A radix tree over token-id lists. Edges hold non-empty token lists; children start with distinct tokens."""

    def __init__(self) -> None:
        raise NotImplementedError

    def match(self, tokens: list[int]) -> int:
        """Length of the longest prefix of tokens that is a prefix of some stored sequence (no changes)."""
        raise NotImplementedError

    def insert(self, tokens: list[int]) -> int:
        """Store tokens (splitting edges where needed); return the match length before inserting."""
        raise NotImplementedError

    def num_nodes(self) -> int:
        """Number of nodes, root excluded."""
        raise NotImplementedError

    def num_tokens(self) -> int:
        """Total number of tokens on all edges."""
        raise NotImplementedError
