"""Text in, text out: prompts to token ids (tokenize) and generated ids back to streamed text (detokenize).

Pure logic, one object per tokenizer; the worker process that runs it behind ZMQ comes with chapter 14."""

from .detokenize import DetokenizeManager, DetokenizeResult, IncrementalDetokenizer
from .stop import StopFilter, scan_for_stop
from .tokenize import TokenizeManager

__all__ = ["DetokenizeManager", "DetokenizeResult", "IncrementalDetokenizer", "StopFilter", "TokenizeManager",
           "scan_for_stop"]
