"""The ``attnkit`` command: ``demo``, ``bench``, ``serve`` and ``show-config``, one module each; this one only parses
and dispatches (``python -m attnkit`` too)."""

import argparse

from attnkit.cli import bench, demo, serve

__all__ = ["main"]


def main(argv=None):
    """Run the command ``argv`` (default: the process's arguments); returns the exit code."""
    from attnkit import __version__

    parser = argparse.ArgumentParser(prog="attnkit", description="Fast transformer attention and models on the CPU.")
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_arguments(sub.add_parser("demo", help="run a small attention example, train a small classifier and a "
                                                   "small seq2seq model, and print the configuration"))
    bench.add_arguments(sub.add_parser("bench", help="run the benchmark scripts of a source checkout (quick by "
                                                     "default) and print their ratio tables"))
    serve.add_arguments(sub.add_parser("serve", help="serve a model over HTTP with OpenAI's API shapes (needs the "
                                                     "serve extra)"))
    sub.add_parser("show-config", help="print version, ISA, threads, compiler and flags")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.run(args)
    if args.command == "bench":
        return bench.run(args)
    if args.command == "serve":
        return serve.run(args)
    import attnkit

    attnkit.show_config()
    return 0
