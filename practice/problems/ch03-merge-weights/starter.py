def merge_weights(items):
    """items: iterable of (name, rows) pairs in any order; rows is a list of rows.

    Returns a list of (name, rows): unmerged tensors as they arrive, merged ones (qkv_proj from
    q/k/v_proj, gate_up_proj from gate/up_proj) when their last part arrives, rows in part order.
    Raises ValueError on a missing part at the end or a part that arrives twice.
    """
    raise NotImplementedError
