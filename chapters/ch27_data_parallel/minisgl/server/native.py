"""SGLang's info routes (chapter 27): what sglang-router asks a worker when it registers it.

The router reads GET /server_info for the name to route by (served_model_name, else model_path: without either it
files the worker under the model "unknown", and `/v1/models` through the router says so) and GET /model_info for
the model's type and architectures. Older routers ask /get_server_info and /get_model_info, which SGLang still
answers; so does this server. Both are read-only and open (no API key), as /health is.
"""

from __future__ import annotations

import json
from pathlib import Path

from minisgl.server.args import ServerArgs
from minisgl.server.frontend import Frontend
from minisgl.server.launch import Workers

VERSION = "minisgl-ch27"  # what /server_info reports as the server's version
# The `model` sglang-router forwards for a request that names none (its placeholder): such a request asks for
# whatever model the server has, as one without the field does.
ROUTER_NO_MODEL = "unknown"


def model_config(model_path: str) -> dict:
    """The model folder's config.json (an empty dict if it has none)."""
    path = Path(model_path) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def server_info(args: ServerArgs, workers: Workers) -> dict:
    """The server's settings under SGLang's names, as far as this server has them."""
    return {"model_path": args.model_path, "tokenizer_path": args.model_path,
            "served_model_name": args.served_model_name, "version": VERSION, "dp_size": 1,
            "max_total_num_tokens": workers.total_slots, "max_running_requests": workers.max_running_reqs,
            "context_length": workers.max_seq_len, "page_size": workers.page_size}


def model_info(args: ServerArgs) -> dict:
    config = model_config(args.model_path)
    return {"model_path": args.model_path, "tokenizer_path": args.model_path, "is_generation": True,
            "model_type": config.get("model_type"), "architectures": config.get("architectures")}


def add_native_routes(app, args: ServerArgs, frontend: Frontend) -> None:
    """GET /server_info and /model_info (and their older /get_* names) on `app`. Each answer is made when asked:
    an app may be built before its workers exist."""
    for path in ("/server_info", "/get_server_info"):
        app.add_api_route(path, lambda: server_info(args, frontend.workers), methods=["GET"])
    for path in ("/model_info", "/get_model_info"):
        app.add_api_route(path, lambda: model_info(args), methods=["GET"])
