"""How many calls took each of the kernels' gated paths (`_core.path_counts`,
cpp/include/scatterx/paths.h): the paths a call reaches only at some sizes, on some CPUs or
under some settings. A test sized for such a path asserts that its calls took it, so that a size
below the path's threshold fails the test rather than passing through another path unseen."""

from __future__ import annotations

import contextlib


from scatterx import _core


@contextlib.contextmanager
def paths_taken():
    """Yields a dict that after the block holds how many calls in it took each gated path, the
    paths no call took left out."""
    taken = {}
    before = _core.path_counts()
    try:
        yield taken
    finally:
        after = _core.path_counts()
        taken.update({path: after[path] - before[path] for path in after if after[path] != before[path]})


def split_paths(calls, width, itemsize):
    """What `calls` calls split by targets take, with the listing `width` bits wide: sixteen
    indices at a time by AVX-512 (512: at most INT32_MAX targets, as every test has), eight with
    8-byte updates beside them or with element numbers ("512/8": `set_list_sixteen(False)`, as
    beyond INT32_MAX targets), four by AVX2, or one at a time."""
    if width == 512:
        listing = "list_avx512_int32"
    elif width == "512/8":
        listing = "list_avx512_values" if itemsize == 8 else "list_avx512"
    else:
        listing = {256: "list_avx2", 0: "list_one"}[width]
    return {"fiber_by_targets": calls, listing: calls}
