import json


def _payloads(event: bytes):
    for line in event.decode("utf-8").split("\n"):
        if line.startswith("data:"):
            yield line[5:][1:] if line[5:6] == " " else line[5:]


def read_stream(chunks: list[bytes]) -> dict:
    out = {"text": "", "finish_reason": None, "usage": None, "error": None, "done": False}
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for payload in _payloads(event):
                if payload == "[DONE]":
                    out["done"] = True
                    return out
                obj = json.loads(payload)
                if "error" in obj:
                    out["error"] = obj["error"]["message"]
                    return out
                for choice in obj.get("choices", []):
                    text = choice["delta"].get("content") if "delta" in choice else choice.get("text")
                    out["text"] += text or ""
                    if choice.get("finish_reason") is not None:
                        out["finish_reason"] = choice["finish_reason"]
                if obj.get("usage") is not None:
                    out["usage"] = obj["usage"]
    return out
