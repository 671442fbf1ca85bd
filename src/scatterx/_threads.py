"""The number of native worker threads (default: SCATTERX_NUM_THREADS, else the usable cores)."""

from __future__ import annotations

import operator
import os
import warnings

from . import _core

ENV_VAR = "SCATTERX_NUM_THREADS"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def set_num_threads(n: int) -> None:
    """Sets the number of threads the native kernels use (>= 1).

    Results do not depend on it: work is split by fibers and every output element has one owner.
    """
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"the number of threads must be an integer, got {type(n).__name__}") from None
    if n < 1:
        raise ValueError(f"the number of threads must be >= 1, got {n}")
    _core.set_num_threads(n)


def get_num_threads() -> int:
    """The number of threads the native kernels use."""
    return _core.get_num_threads()


def _default_threads() -> int:
    value = os.environ.get(ENV_VAR)
    if value:
        try:
            n = int(value)
            if n >= 1:
                return n
        except ValueError:
            pass
        warnings.warn(f"ignoring {ENV_VAR}={value!r}: expected an integer >= 1", RuntimeWarning, stacklevel=3)
    return _usable_cores()


_core.set_num_threads(_default_threads())
