"""One worker's approximate radix tree (chapter 27): the text of the requests a router sent to that worker.

A router in front of several engines cannot see their prefix caches, so it keeps its own guess: every request's
text goes into the tree of the worker it was sent to, and a new request's longest match in a worker's tree says how
much of its prompt that worker probably still has cached. "Approximate" because it is text, not tokens (no tokenizer
in the router), and because the engine may have evicted what the tree still holds. sglang-router keeps one tree of
characters per model whose nodes record which workers hold them; one tree per worker, as here, finds the same
matches.

Each node also remembers the insertion (a number from the router's counter) that first reached it: among workers
that match a request equally far, sglang-router picks the one that reached that part of the text first, and the
policy needs that number to do the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Node:
    text: str  # the edge label: the characters from the parent to this node
    epoch: int  # the insertion that first reached this node
    children: dict[str, Node] = field(default_factory=dict)  # first character of the child's text -> child


def common_prefix(a: str, b: str) -> int:
    """How many leading characters a and b share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ApproxTree:
    """The request text one worker was sent, as a radix tree of characters. `size` counts the characters stored."""

    def __init__(self) -> None:
        self.root = Node("", -1)
        self.size = 0

    def insert(self, text: str, epoch: int) -> None:
        """Add `text`, sent at insertion number `epoch`. Shared leading characters are stored once: walk down while
        a child's text matches, split a child whose text matches only in part (both halves keep its epoch), and
        hang what is left of `text` under the last node as a new leaf with this epoch."""
        # TODO(ch27): walk from the root. At each node take the child keyed by the next character of what is left
        # of `text`: none -> add Node(rest, epoch) there (size grows by len(rest)) and stop. Else k =
        # common_prefix(rest, child.text); if k < len(child.text) split the child: a new Node(child.text[:k],
        # child.epoch) takes its place with the child, its text now child.text[k:], as its only child. Go on from
        # the (new) node with rest[k:]; stop when nothing is left.
        # >>> solution
        node, rest = self.root, text
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                node.children[rest[0]] = Node(rest, epoch)
                self.size += len(rest)
                return
            k = common_prefix(rest, child.text)
            if k < len(child.text):
                upper = Node(child.text[:k], child.epoch, {child.text[k]: child})
                child.text = child.text[k:]
                node.children[rest[0]] = child = upper
            node, rest = child, rest[k:]
        # <<< solution

    def match(self, text: str) -> tuple[int, int]:
        """The longest prefix of `text` this tree holds: (its length in characters, the epoch of the node it ends
        in). A match that ends part-way into a node counts the characters that match; no match is (0, -1)."""
        # TODO(ch27): walk down as insert does, adding up the matched characters; stop at a missing child or at
        # a child that matches only in part (count the part). Return the count and the epoch of the last node
        # entered (-1 when none was).
        # >>> solution
        node, rest, matched = self.root, text, 0
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                break
            k = common_prefix(rest, child.text)
            matched += k
            node = child
            if k < len(child.text):
                break
            rest = rest[k:]
        return matched, node.epoch
        # <<< solution
