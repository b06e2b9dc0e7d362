"""``python -m rollyard_plugins.embedded_engine --model DIR --port P``."""

import argparse
import sys

from rollyard_plugins.embedded_engine.command import add_serve_arguments, serve_from_args


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rollyard_plugins.embedded_engine",
        description="Serve a Hugging Face model with the SGLang HTTP protocol on CPUs.")
    add_serve_arguments(parser)
    return serve_from_args(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
