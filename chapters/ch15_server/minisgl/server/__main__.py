"""`python -m minisgl.server --model PATH`: the OpenAI-compatible server (see args.py for the options)."""

import sys

from minisgl.server.api_server import run_api_server
from minisgl.server.args import parse_args
from minisgl.utils.process import profiled

if __name__ == "__main__":
    with profiled("front-end"):  # MINISGL_PROFILE_DIR set: a profile of this process too (the workers write theirs)
        code = run_api_server(parse_args())
    sys.exit(code)
