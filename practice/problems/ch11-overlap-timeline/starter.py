def timeline(cpu: list[float], gpu: list[float], overlap: bool) -> tuple[float, float]:
    """Return (total, gpu_idle): when the GPU finishes the last step, and its idle time in [0, total]."""
    raise NotImplementedError
