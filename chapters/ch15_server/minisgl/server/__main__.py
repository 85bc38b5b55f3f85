"""`python -m minisgl.server --model PATH`: the OpenAI-compatible server (see args.py for the options)."""

import sys

from minisgl.server.api_server import run_api_server
from minisgl.server.args import parse_args

if __name__ == "__main__":
    sys.exit(run_api_server(parse_args()))
