"""minisgl: a small LLM inference engine, built chapter by chapter."""
