def rope_settings(cfg: dict) -> dict:
    rope = cfg.get("rope_parameters")
    if rope is None:
        rope = cfg.get("rope_scaling")
    rope = dict(rope or {})
    if "type" in rope:
        legacy = rope.pop("type")
        rope.setdefault("rope_type", legacy)
    theta = cfg["rope_theta"] if "rope_theta" in cfg else rope.get("rope_theta", 10000.0)
    rope.pop("rope_theta", None)
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    scaling = rope if rope.get("rope_type", "default") != "default" else None
    return {"theta": float(theta), "head_dim": head_dim, "scaling": scaling}
