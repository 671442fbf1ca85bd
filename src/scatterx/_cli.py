"""The ``scatterx`` command line: ``scatterx demo``, ``scatterx bench``, ``scatterx run``."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from . import _ops
from ._bench import add_arguments as _add_bench_arguments
from ._bench import run as _run_bench
from ._rules import REDUCTIONS


def _needs_onnx(what: str, error: ImportError) -> int:
    print(f"{what} needs the onnx extra ({error}): pip install 'scatterx[onnx]'", file=sys.stderr)
    return 1


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    try:
        from .onnx._run_cli import add_arguments
    except ImportError:
        # Without onnx the other subcommands still work; `run` then explains what is missing.
        parser.add_argument("arguments", nargs=argparse.REMAINDER)
        return
    add_arguments(parser)


def _run_model(args: argparse.Namespace) -> int:
    try:
        from .onnx._run_cli import main as run_model
    except ImportError as e:
        return _needs_onnx("scatterx run", e)
    return run_model(args)


def _demo(args: argparse.Namespace) -> int:
    data = np.zeros((3, 3), np.float64)
    indices = np.array([[1, 0, 2], [0, 2, 1]])
    updates = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float64)
    print("ScatterElements along axis 0")
    print(f"  data    = {data.tolist()}")
    print(f"  indices = {indices.tolist()}")
    print(f"  updates = {updates.tolist()}")
    for reduction in REDUCTIONS:
        result = _ops.scatter_elements(data, indices, updates, axis=0, reduction=reduction)
        print(f"  reduction={reduction!r:6} -> {result.tolist()}")
    data = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]], np.float64)
    indices = np.array([[1, 3]])
    updates = np.array([[1.1, 2.1]], np.float64)
    result = _ops.scatter_elements(data, indices, updates, axis=1)
    print("ScatterElements along axis 1")
    print(f"  data={data.tolist()} indices={indices.tolist()} updates={updates.tolist()}")
    print(f"  -> {result.tolist()}")
    gathered = _ops.gather_elements(result, np.array([[3, 1, -1]]), axis=1)
    print(f"GatherElements of that result at [[3, 1, -1]] along axis 1 -> {gathered.tolist()}")
    try:
        from .onnx._demo import run as train_demo
    except ImportError as e:
        return _needs_onnx("\nThe training part of the demo", e)
    return train_demo(steps=args.steps, output=args.output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scatterx", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="small examples, then train a message-passing layer through an ONNX graph"
    )
    demo.add_argument("--steps", type=int, default=300, help="SGD steps of the training demo (default 300)")
    demo.add_argument("--output", metavar="PATH", help="also keep the trained model at PATH")
    demo.set_defaults(func=_demo)
    bench = sub.add_parser("bench", help="time scatterx against NumPy, PyTorch and onnxruntime, in one table")
    _add_bench_arguments(bench)
    bench.set_defaults(func=_run_bench)
    run = sub.add_parser("run", help="run an ONNX model through scatterx.onnx.Session, outputs to .npy")
    _add_run_arguments(run)
    run.set_defaults(func=_run_model)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
