def replay(graph, static, inputs, size, padding):
    if not inputs:
        raise ValueError("no input buffers")
    if set(inputs) != set(padding):
        raise ValueError(f"inputs name {sorted(inputs)}, padding names {sorted(padding)}")
    missing = [name for name in inputs if name not in static]
    if missing:
        raise ValueError(f"no static buffer for {missing}")
    lengths = {len(values) for values in inputs.values()}
    if len(lengths) != 1:
        raise ValueError(f"input lists of different lengths {sorted(lengths)}")
    n = lengths.pop()
    if not 1 <= n <= size:
        raise ValueError(f"a batch of {n} does not fit the graph of size {size}")
    for name in inputs:
        if size > len(static[name]):
            raise ValueError(f"static buffer {name!r} has {len(static[name])} rows, the graph needs {size}")
    for name, values in inputs.items():
        buf = static[name]  # the list the ops hold: assign into its slices, never rebind static[name]
        buf[:n] = values
        buf[n:size] = [padding[name]] * (size - n)
    for op in graph["ops"]:
        op()
    return graph["output"][:n]
