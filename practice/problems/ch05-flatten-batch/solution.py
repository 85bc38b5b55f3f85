def flatten(reqs: list[tuple[int, int]]) -> dict:
    cu_q, cu_k, positions = [0], [0], []
    for cached, device in reqs:
        if cached < 0 or device <= cached:
            raise ValueError(f"request ({cached}, {device}) has nothing new to compute")
        cu_q.append(cu_q[-1] + device - cached)
        cu_k.append(cu_k[-1] + device)
        positions.extend(range(cached, device))
    return {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "positions": positions,
            "last_indices": [end - 1 for end in cu_q[1:]]}
