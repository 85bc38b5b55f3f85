"""The offline API: LLM(model_path).generate(prompts)."""

from minisgl.llm.llm import LLM

__all__ = ["LLM"]
