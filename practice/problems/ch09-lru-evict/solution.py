import heapq


class LRUTree:
    def __init__(self) -> None:
        self.parent = {0: None}
        self.children = {0: set()}
        self.tokens = {0: 0}
        self.time = {0: 0}
        self.locks = {0: 0}

    def _path(self, node: int) -> list[int]:
        path = []
        while node is not None and node != 0:
            path.append(node)
            node = self.parent[node]
        return path

    def add(self, node: int, parent: int, num_tokens: int, time: int) -> None:
        self.parent[node], self.tokens[node], self.time[node], self.locks[node] = parent, num_tokens, time, 0
        self.children[node] = set()
        self.children[parent].add(node)

    def access(self, node: int, time: int) -> None:
        for n in self._path(node):
            self.time[n] = time

    def lock(self, node: int) -> None:
        for n in self._path(node):
            self.locks[n] += 1

    def unlock(self, node: int) -> None:
        path = self._path(node)
        if any(self.locks[n] == 0 for n in path):
            raise ValueError(f"unlock({node}): a lock count on its path is already 0")
        for n in path:
            self.locks[n] -= 1

    def evictable_tokens(self) -> int:
        return sum(self.tokens[n] for n in self.parent if n != 0 and self.locks[n] == 0)

    def _evictable_leaf(self, n: int) -> bool:
        return n != 0 and not self.children[n] and self.locks[n] == 0

    def evict(self, n: int) -> list[int]:
        heap = [(self.time[x], x) for x in self.parent if self._evictable_leaf(x)]
        heapq.heapify(heap)
        freed, removed = 0, []
        while freed < n and heap:
            _, node = heapq.heappop(heap)
            parent = self.parent.pop(node)
            self.children[parent].discard(node)
            freed += self.tokens.pop(node)
            del self.children[node], self.time[node], self.locks[node]
            removed.append(node)
            if self._evictable_leaf(parent):
                heapq.heappush(heap, (self.time[parent], parent))
        return removed
