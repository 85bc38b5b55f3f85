def rope_settings(cfg: dict) -> dict:
    """Return {"theta": float, "head_dim": int, "scaling": dict | None} from an old-style or
    transformers-5 config dict (see the statement). Must not modify cfg."""
    raise NotImplementedError
