def replay(graph: dict, static: dict[str, list], inputs: dict[str, list], size: int, padding: dict) -> list:
    """Run a batch of n = len(inputs[name]) requests on the graph captured at `size`: in every input buffer
    static[name], rows 0..n-1 get inputs[name] and rows n..size-1 get padding[name] (later rows untouched),
    then run every op of graph["ops"] and return a new list of the first n entries of graph["output"].
    Write into the existing lists (the ops hold them). ValueError, before changing anything, if inputs is
    empty, inputs and padding name different buffers or one missing from static, the input lists differ in
    length, or not 1 <= n <= size <= len(static[name])."""
    raise NotImplementedError
