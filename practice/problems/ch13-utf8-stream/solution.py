def _needed(lead: int) -> int:
    """How many bytes the character starting with this byte takes (0: not a lead byte)."""
    if lead >> 5 == 0b110:
        return 2
    if lead >> 4 == 0b1110:
        return 3
    if lead >> 3 == 0b11110:
        return 4
    return 0


def _incomplete_tail(buf: bytes) -> int:
    """Length of the trailing lead byte + continuation bytes that still wait for more (0 if none)."""
    for back in range(1, min(3, len(buf)) + 1):
        byte = buf[-back]
        if byte >> 6 == 0b10:  # a continuation byte: the lead is further back
            continue
        return back if _needed(byte) > back else 0
    return 0


def utf8_stream(chunks: list[bytes]) -> list[str]:
    out, held = [], b""
    for chunk in chunks:
        buf = held + chunk
        keep = _incomplete_tail(buf)
        out.append(buf[:len(buf) - keep].decode("utf-8", "replace"))
        held = buf[len(buf) - keep:]
    out.append(held.decode("utf-8", "replace"))
    return out
