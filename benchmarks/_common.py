"""What the generation benchmarks share: the same model sizes and prompts on the command line."""


def add_model_arguments(ap):
    """``--hidden/--layers/--heads/--prompt/--new``: one model and prompt set for every
    generation benchmark, so their numbers can be read side by side."""
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, nargs="+", default=[64, 256])
    return ap
