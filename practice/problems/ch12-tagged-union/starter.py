def encode(record: dict, schema: dict) -> list:
    """[tag, field values in schema order...], nested records encoded the same way."""
    raise NotImplementedError


def decode(data, schema: dict) -> dict:
    """The record `data` encodes; ValueError starting with the path of the first bad value."""
    raise NotImplementedError
