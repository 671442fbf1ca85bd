"""Process-wide settings of the native core: the number of worker threads (default:
SCATTERX_NUM_THREADS, else the usable cores) and the byte limit of the output cache."""

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


def set_output_cache_limit(nbytes: int) -> int:
    """Sets how many bytes of freed result arrays scatterx keeps for reuse; returns the limit.

    Results of 1 MiB and more are allocated through a NumPy memory handler that keeps their
    blocks when NumPy frees them (up to this many bytes, oldest dropped first) and hands them out
    again for the next result they fit, which spares faulting in fresh zeroed pages on every call.
    The default is 256 MiB; 0 frees what is kept and turns the reuse off. Platforms without glibc
    always report 0.
    """
    try:
        nbytes = operator.index(nbytes)
    except TypeError:
        raise TypeError(f"the cache limit must be an integer, got {type(nbytes).__name__}") from None
    if nbytes < 0:
        raise ValueError(f"the cache limit must be >= 0, got {nbytes}")
    return _core.set_output_cache_limit(nbytes)


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
