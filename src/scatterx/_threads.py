"""Process-wide settings of the native core: the number of worker threads (default:
SCATTERX_NUM_THREADS, else the usable cores), the byte limit of the output cache, and whether
large results are marked for huge pages (as NumPy marks its own arrays)."""

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


def _integer(value, low: int, what: str) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None
    if value < low:
        raise ValueError(f"{what} must be >= {low}, got {value}")
    return value


def set_num_threads(n: int) -> None:
    """Sets the number of threads the native kernels use (>= 1).

    Results do not depend on it: work is split by fibers and every output element has one owner.
    """
    _core.set_num_threads(_integer(n, 1, "the number of threads"))


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
    return _core.set_output_cache_limit(_integer(nbytes, 0, "the cache limit"))


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


def _numpy_huge_pages() -> bool:
    """Whether NumPy marks its large arrays for transparent huge pages (its default on Linux
    from kernel 4.6; a user may turn it off with ``_set_madvise_hugepage``), read by setting it
    and setting it back. False where NumPy has no such setting."""
    try:
        from numpy._core import multiarray
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray
    toggle = getattr(multiarray, "_set_madvise_hugepage", None)
    if toggle is None:
        return False
    enabled = toggle(True)
    toggle(enabled)
    return bool(enabled)


_core.set_num_threads(_default_threads())
# scatterx's large results are marked for huge pages when NumPy marks its own arrays.
_core.set_huge_pages(_numpy_huge_pages())
