class _Node:
    def __init__(self, key: list[int]) -> None:
        self.key = key                      # the tokens on the edge into this node
        self.children: dict[int, _Node] = {}


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


class RadixTree:
    def __init__(self) -> None:
        self.root = _Node([])

    def match(self, tokens: list[int]) -> int:
        node, done = self.root, 0
        while done < len(tokens):
            child = node.children.get(tokens[done])
            if child is None:
                break
            n = _common(child.key, tokens[done:])
            done += n
            if n < len(child.key):
                break
            node = child
        return done

    def insert(self, tokens: list[int]) -> int:
        tokens = list(tokens)
        node, done = self.root, 0
        while done < len(tokens):
            child = node.children.get(tokens[done])
            if child is None:
                node.children[tokens[done]] = _Node(tokens[done:])
                return done
            n = _common(child.key, tokens[done:])
            if n < len(child.key):             # split the edge at n
                upper = _Node(child.key[:n])
                child.key = child.key[n:]
                upper.children[child.key[0]] = child
                node.children[upper.key[0]] = upper
                child = upper
            done += n
            node = child
        return done

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def num_nodes(self) -> int:
        return sum(1 for _ in self._nodes())

    def num_tokens(self) -> int:
        return sum(len(node.key) for node in self._nodes())
