def rms_norm(x: list[list[float]], weight: list[float], eps: float) -> list[list[float]]:
    """Normalize every row of x by its root mean square, then scale by weight."""
    raise NotImplementedError


def fused_add_rms_norm(x: list[list[float]], residual: list[list[float]] | None, weight: list[float],
                       eps: float) -> tuple[list[list[float]], list[list[float]]]:
    """(rms_norm(x + residual), x + residual); with residual None: (rms_norm(x), a copy of x)."""
    raise NotImplementedError
