def route(frames: list) -> tuple[object, object, list[str]]:
    """(the scheduler's frame, the front end's frame, problems): a frame is None, one message, or a list."""
    raise NotImplementedError
