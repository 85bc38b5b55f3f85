"""Speculative decoding (chapter 26): proposers of draft tokens and the verification of drafts."""

from minisgl.spec.config import SpecConfig
from minisgl.spec.ngram import NgramProposer, ngram_lookup
from minisgl.spec.factory import make_proposer
from minisgl.spec.proposer import Proposer
from minisgl.spec.verify import SpecStats, accept_greedy, accept_rejection, target_probs, verify_batch

__all__ = ["NgramProposer", "Proposer", "SpecConfig", "SpecStats", "accept_greedy", "accept_rejection",
           "make_proposer", "ngram_lookup", "target_probs", "verify_batch"]
