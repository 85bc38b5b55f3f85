"""The engine: one model, one KV cache, one forward pass per batch."""

from minisgl.engine.config import EngineConfig
from minisgl.engine.engine import Engine

__all__ = ["Engine", "EngineConfig"]
