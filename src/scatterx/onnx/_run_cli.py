"""``scatterx run MODEL.onnx --input NAME=FILE.npy ... [--output-dir DIR]``: a model through `Session`."""

from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path of an ONNX model")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input of the model from a .npy file (repeat for each input)")
    parser.add_argument("--output-dir", "-o", default=".", metavar="DIR",
                        help="where every output is written as NAME.npy (default: the current folder)")


def file_name(name: str, taken: set[str]) -> str:
    """A file name for output `name` that stays inside the output folder and is not taken yet."""
    stem = _UNSAFE.sub("_", name).lstrip(".") or "_"
    candidate, k = stem, 1
    while candidate in taken:
        candidate, k = f"{stem}_{k}", k + 1
    taken.add(candidate)
    return candidate + ".npy"


def _savable(value: object) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object:
        # .npy files of Python objects need pickle; strings are written as fixed-width text.
        kinds = {type(v) for v in arr.ravel()}
        arr = arr.astype(bytes if kinds == {bytes} else str)
    return arr


def main(args: argparse.Namespace) -> int:
    from ._session import Session

    def fail(message: str) -> int:
        print(f"scatterx run: error: {message}", file=sys.stderr)
        return 2

    feeds: dict[str, np.ndarray] = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            return fail(f"--input takes NAME=FILE.npy, got {item!r}")
        if name in feeds:
            return fail(f"input {name!r} is given twice")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            return fail(f"cannot read input {name!r} from {path}: {e}")
    try:
        session = Session(args.model)
    except FileNotFoundError as e:
        return fail(str(e))
    except (OSError, ValueError, TypeError) as e:
        return fail(f"cannot load {args.model}: {e}")
    try:
        outputs = session.run(feeds)
    except (ValueError, TypeError, IndexError, RuntimeError) as e:
        return fail(str(e))
    os.makedirs(args.output_dir, exist_ok=True)
    taken: set[str] = set()
    for name, value in outputs.items():
        # A sequence output is written element by element, as NAME_0.npy, NAME_1.npy, ...
        items = [(f"{name}[{k}]", f"{name}_{k}", v) for k, v in enumerate(value)] if isinstance(value, list) \
            else [(name, name, value)]
        for label, stem, v in items:
            arr = _savable(v)
            target = os.path.join(args.output_dir, file_name(stem, taken))
            np.save(target, arr, allow_pickle=False)
            print(f"{label}: shape {arr.shape} dtype {arr.dtype} -> {target}")
    return 0
