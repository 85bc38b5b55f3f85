def norm_traffic(tokens: int, hidden: int, dtype_bytes: int, residual: bool, fused: bool) -> tuple[int, int]:
    """(bytes read + written, kernel launches) of (residual add +) RMSNorm over [tokens, hidden], unfused as
    in the statement's table or as one fused kernel. ValueError for tokens < 1, hidden < 1, dtype_bytes not 2/4."""
    raise NotImplementedError
