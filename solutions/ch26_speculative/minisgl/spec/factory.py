"""make_proposer: the proposer a SpecConfig asks for."""

from __future__ import annotations

from minisgl.engine.engine import Engine
from minisgl.spec.config import SpecConfig
from minisgl.spec.proposer import Proposer


def make_proposer(config: SpecConfig, target: Engine) -> Proposer:
    """The proposer of config.method, for requests that run on `target` (a draft model loads its own engine)."""
    if config.method == "eagle":
        from minisgl.spec.eagle import EagleProposer

        return EagleProposer(config, target)
    if config.method == "draft":
        from minisgl.spec.draft import DraftProposer

        return DraftProposer(config, target)
    from minisgl.spec.ngram import NgramProposer

    return NgramProposer(config)
