"""The native fast paths against NumPy's one-by-one ``ufunc.at`` and ``take_along_axis``.

Each fast path (rows with one target, stride-0 index rows, long runs of indices checked in the
work loop, the F16C float16 row add) only runs for shapes wider than the small hypothesis cases
reach, so these cases are sized for it. ``ufunc.at`` applies updates one at a time in index order, which is the
sequential semantics; float16 results must match bit for bit.
"""

from __future__ import annotations

import contextlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oracle
from gated_paths import paths_taken, split_paths
import scatterx as sx
from scatterx import _core, _kernels
from scatterx._rules import scatter_call

UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _positions(data, indices):
    """The positions of data that an axis-0 index names, as a tuple of coordinate arrays."""
    coords = list(np.indices(indices.shape))
    coords[0] = np.where(indices < 0, indices.astype(np.int64) + data.shape[0], indices)
    return tuple(coords)


def _sequential_axis0(data, indices, updates, reduction):
    """The scatter along axis 0 one update at a time in row-major order of the indices (NumPy,
    not scatterx): ``ufunc.at``, or row by row for "none" (a row's targets are distinct)."""
    out = data.copy()
    coords = _positions(data, indices)
    if reduction == "none":
        for j in range(indices.shape[0]):
            out[tuple(c[j] for c in coords)] = updates[j]
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            UFUNCS[reduction].at(out, coords, updates)
    return out


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.int32])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("layout", ["materialised", "stride0"])
def test_rows_with_one_target(dtype, reduction, layout):
    """Rows of updates whose index row holds one value (a stride-0 broadcast or the same index
    materialised), of every dtype and reduction, against NumPy's one update at a time, and the
    gather of those rows. 400 rows of 37 into 50 are below the split by target rows
    (`scatter_by_target_rows`, the path `rows_by_target`; see
    test_broadcast_index_rows_split_by_destination): the row walk (`scatter_rows`) applies each
    row whole to its one target here, and no gated path is taken."""
    rng = np.random.default_rng(7)
    data = (rng.standard_normal((50, 37)) * 3).astype(dtype)
    rows = rng.integers(-50, 50, 400)
    updates = (rng.standard_normal((400, 37)) * 3).astype(dtype)
    if reduction == "mul":
        updates = (1 + rng.standard_normal((400, 37)) / 50).astype(dtype)
    base = rows[:, None]
    indices = np.broadcast_to(base, updates.shape)
    if layout == "materialised":
        indices = np.ascontiguousarray(indices)
    with paths_taken() as taken:
        got = sx.scatter_elements(data, indices, updates, axis=0, reduction=reduction)
    assert taken == {}
    want = _sequential_axis0(data, indices, updates, reduction)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(sx.gather_elements(data, indices, axis=0), data[rows])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.complex128, np.bool_])
@pytest.mark.parametrize("value", [0.0, -0.0, 1.5])
@pytest.mark.parametrize("index", ["rows", "random"])
def test_scatter_into_one_broadcast_value(restore_threads, threads, dtype, value, index):
    """Data that is one value broadcast (stride 0 throughout, as the zeros that the backward of
    a gather scatters into) is filled in natively before the updates: an element no update
    reaches keeps that value, bits included (-0.0 is not filled as zero bytes)."""
    sx.set_num_threads(threads)
    rng = np.random.default_rng(11)
    data = np.broadcast_to(np.array(value).astype(dtype), (3000, 64))
    updates = (rng.standard_normal((2000, 64)) * 3).astype(dtype)
    rows = rng.integers(-3000, 3000, 2000)
    if index == "rows":
        indices = np.broadcast_to(rows[:, None], updates.shape)
    else:
        indices = rng.integers(-3000, 3000, updates.shape)
    reduction = "none" if dtype is np.bool_ else "add"
    got = sx.scatter_elements(data, indices, updates, axis=0, reduction=reduction)
    want = _sequential_axis0(np.array(data), indices, updates, reduction)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    if index == "rows":  # rows no update reaches: the broadcast value's own bytes
        untouched = np.ones(data.shape[0], bool)
        untouched[np.where(rows < 0, rows + 3000, rows)] = False
        np.testing.assert_array_equal(got[untouched].view(np.uint8),
                                      np.array(data)[untouched].view(np.uint8))


SPECIAL_BITS = {  # zeros, infinities, quiet and signalling NaNs, the smallest and largest finite
    np.float16: [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x0001, 0x8001, 0x7BFF, 0xFBFF],
    ml_dtypes.bfloat16: [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x0001, 0x8001, 0x7F7F, 0xFF7F],
}


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("reduction", ["max", "min"])
def test_16_bit_max_min_on_every_bit_pattern(dtype, reduction):
    """max/min of 16-bit floats against the rule computed by NumPy on the values widened to
    float32: the update replaces the current value when it lies strictly beyond it, or when it
    is NaN and the current value is not (ties, -0.0 against 0.0 included, keep the current
    bits). Every bit pattern is a current value, against six rotations of them all and each
    special value."""
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    rng = np.random.default_rng(5)
    partners = [np.roll(every, int(s)) for s in rng.integers(1, 65535, 6)]
    partners += [np.full(65536, bits, np.uint16) for bits in SPECIAL_BITS[dtype]]
    current = every.view(dtype)
    for update_bits in partners:
        updates = update_bits.view(dtype)
        got = sx.scatter_elements(current, np.arange(65536), updates, axis=0, reduction=reduction)
        a, b = current.astype(np.float32), updates.astype(np.float32)
        with np.errstate(invalid="ignore"):
            beyond = b > a if reduction == "max" else b < a
        take = beyond | (np.isnan(b) & ~np.isnan(a))
        np.testing.assert_array_equal(got.view(np.uint16), np.where(take, update_bits, every))


def test_float16_row_add_rounds_every_step():
    # 2048 + 1 + 1 in float16: each step rounds back to 2048 (sequential semantics).
    data = np.full((1, 64), 2048, np.float16)
    updates = np.ones((2, 64), np.float16)
    indices = np.zeros((2, 64), np.int64)
    got = sx.scatter_elements(data, indices, updates, reduction="add")
    np.testing.assert_array_equal(got, np.full((1, 64), 2048, np.float16))


def test_float16_row_add_special_values():
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 6e-8, -6e-8], np.float16)
    rng = np.random.default_rng(3)
    data = rng.choice(specials, (4, 40)).astype(np.float16)
    updates = rng.choice(specials, (30, 40)).astype(np.float16)
    rows = rng.integers(0, 4, 30)
    indices = np.ascontiguousarray(np.broadcast_to(rows[:, None], updates.shape))
    got = sx.scatter_elements(data, indices, updates, reduction="add")
    want = _sequential_axis0(data, indices, updates, "add")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint16), want[ok].view(np.uint16))


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_row_adds_agree_with_element_adds_bit_for_bit(dtype, reduction):
    """Rows of one target of float16 and bfloat16 are added (multiplied) by hand-written vector
    code (float16: AVX512-FP16 thirty-two at a time, AVX-512F sixteen, F16C eight; bfloat16:
    thirty-two at a time rounded by AVX512_BF16 or AVX-512BW, AVX2 sixteen and eight), where the
    CPU has it; the same operations along the last axis go element by element. Random bit
    patterns (NaNs of both signs and with payloads, infinities, subnormals) must come out the same
    bits both ways, NaN signs included, 88 columns: two vectors of 32, then for bfloat16 one of 16
    and one of 8, for float16 one of 16 and one of 8. (float32's vector adds, which the compiler
    writes, may give a NaN plus a NaN the other operand's payload: payloads are outside the
    bitwise promise, as in test_fuzz.py.)"""
    rng = np.random.default_rng(8)
    width = np.uint16
    data = rng.integers(0, np.iinfo(width).max, (40, 88), dtype=width, endpoint=True).view(dtype)
    updates = rng.integers(0, np.iinfo(width).max, (3000, 88), dtype=width, endpoint=True).view(dtype)
    rows = rng.integers(0, 40, 3000)
    with np.errstate(all="ignore"):
        by_rows = sx.scatter_elements(data, np.broadcast_to(rows[:, None], updates.shape), updates, 0, reduction)
        by_elements = sx.scatter_elements(
            np.ascontiguousarray(data.T), np.ascontiguousarray(np.broadcast_to(rows[None, :], updates.T.shape)),
            np.ascontiguousarray(updates.T), 1, reduction).T
    assert np.isnan(by_rows.astype(np.float32)).sum() > 100  # the NaN rule is exercised
    np.testing.assert_array_equal(by_rows.view(width), by_elements.view(width))


# Per 16-bit float type: the mask of its exponent bits, and its exponent bias.
HALF_LAYOUT = {np.float16: (0x7C00, 15), ml_dtypes.bfloat16: (0x7F80, 127)}


def _half_bits(rng, dtype, kind, shape):
    """16-bit float bit patterns of one kind: "normal" (both signs, exponents of 2^-10 to 2^10,
    zeros of both signs, and one in 200 a positive value near the largest, so that sums overflow
    to infinity but no NaN arises), "tiny" (subnormals and the smallest normals, whose float32
    sums are, for bfloat16, subnormal) or "mixed" (random patterns, NaNs of both signs and with
    payloads among them)."""
    exponent_mask, bias = HALF_LAYOUT[dtype]
    shift = int(exponent_mask & -exponent_mask).bit_length() - 1  # the exponent's lowest bit
    mantissa = (1 << shift) - 1
    bits = rng.integers(0, 1 << 16, shape).astype(np.uint16)
    if kind == "mixed":
        return bits
    if kind == "tiny":
        return bits & (0x8000 | (1 << shift) | mantissa)  # exponent 0 or 1
    exponent = rng.integers(bias - 10, bias + 11, shape).astype(np.uint16)
    bits = (bits & (0x8000 | mantissa)) | (exponent << shift)
    bits[rng.random(shape) < 0.05] &= 0x8000
    huge = rng.random(shape) < 0.005
    bits[huge] = (exponent_mask - (1 << shift)) | (bits[huge] & mantissa)
    return bits.astype(np.uint16)


def _rows_both_ways(data, updates, rows, reduction):
    """Applies `updates` to the target rows `rows` of `data` (a stride-0 index along axis 0) with
    the CPU's 16-bit float instructions off and on (`set_half_rows`); checks that both give
    NumPy's (ml_dtypes') sequential result bit for bit where it is not a NaN, NaN where it is a
    NaN, and the same bits as each other. Returns that result and whether each element is NaN."""
    index = np.broadcast_to(rows[:, None], updates.shape)
    want = _sequential_axis0(data, index, updates, reduction)
    before = _core.set_half_rows(True)
    got = {}
    try:
        for way in (False, True):
            _core.set_half_rows(way)
            with np.errstate(all="ignore"):
                got[way] = sx.scatter_elements(data, index, updates, 0, reduction)
    finally:
        _core.set_half_rows(before)
    nan = np.isnan(want.astype(np.float32))
    for way in (False, True):
        np.testing.assert_array_equal(np.isnan(got[way].astype(np.float32)), nan)
        np.testing.assert_array_equal(got[way].view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    np.testing.assert_array_equal(got[True].view(np.uint16), got[False].view(np.uint16))
    return want, nan


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("kind", ["normal", "tiny", "mixed"])
def test_16bit_row_adds_by_the_cpus_instructions(dtype, kind):
    """Rows of 16-bit float adds take the CPU's own instructions where it has them
    (`set_half_rows`, `half_row_instructions`): float16 adds by AVX512-FP16's vaddph, thirty-two
    at a time in float16 itself; bfloat16 sums rounded by AVX512_BF16's vcvtne2ps2bf16, thirty-two
    at a time, where a vector whose float32 sums hold a NaN or a subnormal (which that instruction
    would quiet keeping its payload, or take as zero) goes by the integer rounding instead. Both
    settings give NumPy's (ml_dtypes') sums one row at a time, bit for bit where the result is not
    a NaN, and the same bits as each other everywhere: "normal" values of every exponent
    (overflow to infinity, ties in 7 % of the pairs, zeros; no NaN, so every vector goes the
    instructions' way), "tiny" ones whose sums are subnormal, and "mixed" random patterns. 96
    columns: three vectors of 32."""
    rng = np.random.default_rng(41)
    targets = 2000 if kind == "tiny" else 16  # tiny sums stay tiny over few adds
    data = _half_bits(rng, dtype, kind, (targets, 96)).view(dtype)
    updates = _half_bits(rng, dtype, kind, (4000, 96)).view(dtype)
    want, nan = _rows_both_ways(data, updates, rng.integers(0, targets, 4000), "add")
    exponent_mask = HALF_LAYOUT[dtype][0]
    if kind == "tiny":
        assert ((want.view(np.uint16) & exponent_mask) == 0).mean() > 0.2  # subnormal results are common
    if kind == "normal":
        assert not nan.any() and np.isinf(want.astype(np.float32)).any()
        assert np.isfinite(want.astype(np.float32)).mean() > 0.5


# Per 16-bit float type, the unbiased exponents of "small" factors (_half_factor_bits): their
# products fall about the smallest normal, float16's own for float16 and float32's for bfloat16,
# whose products are rounded in float32 first.
SMALL_FACTOR_EXPONENTS = {np.float16: (-12, -3), ml_dtypes.bfloat16: (-66, -60)}


def _half_factor_bits(rng, dtype, kind, shape):
    """16-bit float bit patterns of one kind, for products: "near_one" (both signs, magnitudes in
    [0.5, 2), so that a few products stay finite and normal), "small" (both signs, exponents of
    SMALL_FACTOR_EXPONENTS, so that a product of two is subnormal as often as not) or "mixed"
    (random patterns, as _half_bits)."""
    if kind == "mixed":
        return _half_bits(rng, dtype, kind, shape)
    exponent_mask, bias = HALF_LAYOUT[dtype]
    shift = int(exponent_mask & -exponent_mask).bit_length() - 1
    low, high = {"near_one": (-1, 0), "small": SMALL_FACTOR_EXPONENTS[dtype]}[kind]
    exponent = rng.integers(bias + low, bias + high + 1, shape).astype(np.uint16)
    bits = rng.integers(0, 1 << 16, shape).astype(np.uint16) & (0x8000 | ((1 << shift) - 1))
    return (bits | (exponent << shift)).astype(np.uint16)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("kind", ["near_one", "small", "mixed"])
def test_16bit_row_products_by_the_cpus_instructions(dtype, kind):
    """Rows of 16-bit float products go as the adds do (`set_half_rows`): float16 by AVX512-FP16's
    vmulph, bfloat16 by float32 products rounded by AVX512_BF16's vcvtne2ps2bf16 where no product
    is a NaN or subnormal, else by the integer rounding; the conversions by float32 otherwise. Both
    settings give NumPy's (ml_dtypes') products one row at a time, bit for bit where the result is
    not a NaN, and the same bits as each other everywhere: factors "near_one" (ten products per
    target), "small" ones whose products are subnormal (one or two per target) and "mixed" random
    patterns. 96 columns: three vectors of 32."""
    rng = np.random.default_rng(43)
    targets = {"near_one": 400, "small": 3000, "mixed": 16}[kind]
    data = _half_factor_bits(rng, dtype, kind, (targets, 96)).view(dtype)
    updates = _half_factor_bits(rng, dtype, kind, (4000, 96)).view(dtype)
    rows = rng.integers(0, targets, 4000)
    want, nan = _rows_both_ways(data, updates, rows, "mul")
    bits = want.view(np.uint16)
    subnormal = ((bits & HALF_LAYOUT[dtype][0]) == 0) & ((bits & 0x7FFF) != 0)
    if kind == "near_one":
        assert not nan.any() and np.isfinite(want.astype(np.float32)).all() and not subnormal.any()
    if kind == "small":
        assert subnormal[np.isin(np.arange(targets), rows)].mean() > 0.1  # subnormal products are common
    if kind == "mixed":
        assert nan.any()


def test_16bit_row_instructions_are_the_cpus():
    """The module finds the 16-bit float instructions that the rows take (AVX512-FP16 for float16,
    AVX512_BF16 for bfloat16; built where the compiler knows them) on the CPU exactly where Linux
    lists them."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    built = _core.half_row_instructions()
    if not built:
        pytest.skip("the module was built without the 16-bit float instructions")
    assert built == {"avx512fp16": "avx512_fp16" in flags, "avx512bf16": "avx512_bf16" in flags}


@pytest.mark.parametrize("axis", [0, 1])
def test_plain_chunks_and_negative_indices(axis):
    """Long rows and fibers (indices checked in the work loop), with and without negative indices."""
    rng = np.random.default_rng(11)
    data = rng.standard_normal((600, 700))
    shape = (1500, 700) if axis == 0 else (600, 1500)
    for low in (0, -data.shape[axis]):
        indices = rng.integers(low, data.shape[axis], shape)
        updates = rng.standard_normal(shape)
        index = list(np.indices(shape, sparse=True))
        index[axis] = np.where(indices < 0, indices + data.shape[axis], indices)
        want = data.copy()
        np.add.at(want, tuple(index), updates)
        got = sx.scatter_elements(data, indices, updates, axis=axis, reduction="add")
        np.testing.assert_array_equal(got, want)
        gathered = sx.gather_elements(data, indices, axis=axis)
        np.testing.assert_array_equal(gathered, np.take_along_axis(data, index[axis], axis))


def test_out_of_bounds_inside_a_plain_looking_row_is_caught():
    data = np.zeros((10, 64), np.float32)
    indices = np.zeros((5, 64), np.int64)
    indices[3, 63] = 10
    with pytest.raises(IndexError, match=r"index 10 at indices\[3, 63\]"):
        sx.scatter_elements(data, indices, np.ones((5, 64), np.float32), reduction="add")
    with pytest.raises(IndexError, match=r"index 10 at indices\[3, 63\]"):
        sx.gather_elements(data, indices)


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_last_axis_gather_in_groups_of_four(dtype, index_dtype):
    """The last-axis gather checks four indices with one branch: every fiber length 1..9 (whole
    groups and a tail), negative indices in any slot, and an out-of-bounds index in each slot
    of a group, which is named and leaves `out` as it was."""
    rng = np.random.default_rng(11)
    data = (rng.standard_normal((4, 13)) * 50).astype(dtype)
    for n in range(1, 10):
        indices = rng.integers(-13, 13, (4, n)).astype(index_dtype)
        np.testing.assert_array_equal(
            sx.gather_elements(data, indices, axis=1), np.take_along_axis(data, indices % 13, 1)
        )
        for slot in range(n):
            bad = indices.copy()
            bad[2, slot] = -14 if slot % 2 else 13
            out = np.full((4, n), 7, dtype)
            with pytest.raises(IndexError, match=rf"index {bad[2, slot]} at indices\[2, {slot}\]"):
                sx.gather_elements(data, bad, axis=1, out=out)
            np.testing.assert_array_equal(out, 7)
            with pytest.raises(IndexError, match=rf"index {bad[2, slot]} at indices\[2, {slot}\]"):
                sx.gather_elements(data, bad, axis=1)


def test_precheck_of_a_broadcast_index_names_the_first_position():
    """With out= every index is checked first; a stride-0 index is read once per distinct value,
    and the error still names the first bad position in row-major order."""
    rows = np.broadcast_to(np.array([[0], [1], [7], [2], [9]]), (5, 6))
    out = np.full((3, 6), 5.0)
    with pytest.raises(IndexError, match=r"index 7 at indices\[2, 0\]"):
        sx.scatter_elements(np.zeros((3, 6)), rows, np.ones((5, 6)), reduction="add", out=out)
    np.testing.assert_array_equal(out, 5.0)
    cols = np.broadcast_to(np.array([0, 1, 2, -9, 1, 30]), (3, 6))
    with pytest.raises(IndexError, match=r"index -9 at indices\[0, 3\]"):
        sx.gather_elements(np.zeros((3, 6)), cols, axis=1, out=np.zeros((3, 6)))


@pytest.mark.parametrize("axis", [0, 1])
def test_empty_axis_with_indices_raises(axis):
    """Data with length 0 along the axis: every index is out of bounds (the row-prefetching
    gather once divided by the zero row length here)."""
    data = np.zeros((0, 5), np.float32) if axis == 0 else np.zeros((6, 0), np.float32)
    indices = np.zeros((3, 5) if axis == 0 else (6, 3), np.int64)
    with pytest.raises(IndexError, match="out of bounds"):
        sx.gather_elements(data, indices, axis=axis)
    with pytest.raises(IndexError, match="out of bounds"):
        sx.scatter_elements(data, indices, np.ones(indices.shape, np.float32), axis=axis)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("layout", ["C", "F", "reversed"])
def test_middle_axis_and_fused_copy_paths(threads, layout):
    """Large enough to run in parallel: a middle-axis gather (split by blocks of fibers) and
    scatters whose copy of data is fused fiber by fiber (index covering every fiber) or not
    (index smaller than data), or that have no copy (out=data: each block's target rows are
    read in first), against NumPy, for every thread count."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((12, 90, 70))
    if layout == "F":
        data = np.asfortranarray(data)
    elif layout == "reversed":
        data = data[::-1, :, ::-1]
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    try:
        for ishape in [(12, 160, 70), (12, 160, 50), (7, 160, 70)]:
            indices = rng.integers(-90, 90, ishape)
            updates = rng.standard_normal(ishape)
            index = list(np.indices(ishape, sparse=True))
            index[1] = np.where(indices < 0, indices + 90, indices)
            want = data.copy()
            np.add.at(want, tuple(index), updates)
            np.testing.assert_array_equal(sx.scatter_elements(data, indices, updates, axis=1, reduction="add"), want)
            out = np.full(data.shape, np.nan)
            sx.scatter_elements(data, indices, updates, axis=1, reduction="add", out=out)
            np.testing.assert_array_equal(out, want)
            inplace = data.copy(order="K")
            assert sx.scatter_elements(inplace, indices, updates, axis=1, reduction="add", out=inplace) is inplace
            np.testing.assert_array_equal(inplace, want)
            got = sx.gather_elements(data, indices, axis=1)
            np.testing.assert_array_equal(got, data[tuple(index)])
    finally:
        sx.set_num_threads(previous)


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_one_long_fiber_with_a_reader_thread(threads, reduction, ahead):
    """A 1-D scatter long enough for the second thread to read ahead of the first: the result
    is the sequential one, bit for bit, and a bad index is still reported; with the index and
    update streams asked for ahead and without (`set_fiber_streams_ahead`, chosen by CPU)."""
    rng = np.random.default_rng(12)
    n = (1 << 20) + 12345
    data = rng.standard_normal(1000)
    indices = rng.integers(-1000, 1000, n)
    updates = rng.standard_normal(n)
    want = data.copy()
    positive = np.where(indices < 0, indices + 1000, indices)
    if reduction == "none":
        targets, last = np.unique(positive[::-1], return_index=True)  # the last writer wins
        want[targets] = updates[::-1][last]
    else:
        UFUNCS[reduction].at(want, positive, updates)
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    before = _core.set_fiber_streams_ahead(ahead)
    try:
        with paths_taken() as taken:
            got = sx.scatter_elements(data, indices, updates, reduction=reduction)
            got32 = sx.scatter_elements(data, indices.astype(np.int32), updates, reduction=reduction)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got32, want)
        assert taken == ({"fiber_reader": 2} if threads == 2 else {})
        indices[n - 7] = 1000
        with pytest.raises(IndexError, match=rf"index 1000 at indices\[{n - 7}\]"):
            sx.scatter_elements(data, indices, updates, reduction=reduction)
    finally:
        _core.set_fiber_streams_ahead(before)
        sx.set_num_threads(previous)


def _bad_index_reported(data, wrong, at, updates, reduction):
    """A scatter whose index holds a bad value at `at` raises IndexError naming it (int64), and
    into out=data (int32) writes nothing."""
    with pytest.raises(IndexError, match=rf"index {wrong[at]} at indices\[{at}\]"):
        sx.scatter_elements(data, wrong, updates, reduction=reduction)
    out = data.copy()
    with pytest.raises(IndexError):
        sx.scatter_elements(out, wrong.astype(np.int32), updates, reduction=reduction, out=out)
    np.testing.assert_array_equal(out, data)


def _sequential(data, indices, updates, reduction):
    """The one-thread loop's result: NumPy's ufunc.at, or for "none" the last writer."""
    want = data.copy()
    positive = np.where(indices < 0, indices + data.shape[0], indices)
    if reduction == "none":
        targets, last = np.unique(positive[::-1], return_index=True)
        want[targets] = updates[::-1][last]
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            UFUNCS[reduction].at(want, positive, updates)
    return want


# The listing's widths the split tests go through: "512/8" is AVX-512's eight at a time, which it
# takes beyond INT32_MAX targets (`set_list_sixteen(False)`); 512 lists sixteen at a time.
_WIDTHS = [0, 256, 512, "512/8"]


@pytest.fixture(autouse=True)
def _sixteen_restored():
    """Each test leaves the listing's sixteen at a time (`set_list_sixteen`) as it found it."""
    before = _core.set_list_sixteen(True)
    _core.set_list_sixteen(before)
    yield
    _core.set_list_sixteen(before)


def _width_supported(bits):
    """Whether `set_list_width` takes `bits` on this CPU (the setting left as it was)."""
    if bits == "512/8":
        bits = 512
    try:
        before = _core.set_list_width(bits)
    except ValueError:
        return False
    _core.set_list_width(before)
    return True


def _default_list_width():
    """The listing's width in force (`set_list_width`, the widest the CPU has by default)."""
    bits = _core.set_list_width(0)
    _core.set_list_width(bits)
    return bits


def _list_width(bits):
    """Sets the width of the listing and of the sorted fiber's check (`set_list_width`; "512/8":
    512 with `set_list_sixteen(False)`) and returns the width before; skips where the CPU has no
    vectors of that width."""
    if not _width_supported(bits):
        pytest.skip(f"the CPU has no {bits}-bit vectors")
    _core.set_list_sixteen(bits != "512/8")
    return _core.set_list_width(512 if bits == "512/8" else bits)


@contextlib.contextmanager
def _split_forced_on_two_threads(width):
    """Two threads, the listing at `width` bits (skipped where the CPU lacks it) and the split by
    targets forced on (`set_fiber_split(1)`); each setting restored afterwards."""
    before = _list_width(width)
    previous = sx.get_num_threads()
    sx.set_num_threads(2)
    mode = _core.set_fiber_split(1)
    try:
        yield
    finally:
        _core.set_fiber_split(mode)
        sx.set_num_threads(previous)
        _core.set_list_width(before)


def test_list_width_and_split_settings_reject_what_cannot_be():
    """The listing's width is 0, 256 (AVX2) or 512 (AVX-512F), the widest the CPU has by default;
    the split's mode is 0, 1 or 2 (by the CPU, the default). Anything else raises and leaves the
    setting as it was."""
    widths = [bits for bits in (0, 256, 512) if _width_supported(bits)]
    assert 0 in widths
    assert _core.set_list_width(max(widths)) == max(widths)
    for bits in (128, 1024, -1):
        with pytest.raises(ValueError):
            _core.set_list_width(bits)
    assert _core.set_list_width(max(widths)) == max(widths)
    assert _core.set_fiber_split(2) == 2
    for mode in (3, -1):
        with pytest.raises(ValueError):
            _core.set_fiber_split(mode)
    assert _core.set_fiber_split(2) == 2
    assert _core.set_list_sixteen(False) is True  # on by default
    assert _core.set_list_sixteen(True) is False


@pytest.mark.parametrize("width", _WIDTHS)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_one_long_fiber_split_by_targets(threads, reduction, width):
    """A 1-D scatter into more targets than L1 holds (160 KB of float64), its indices random:
    on two threads or more each thread applies the updates of its half of the targets (the split
    forced on, `set_fiber_split(1)`), listed sixteen or eight at a time by AVX-512F, four by AVX2
    or one at a time (`set_list_width`, `set_list_sixteen`, each the CPU has). The result is the sequential loop's bit for
    bit, for int64 and int32 indices, negative ones among them, with a new output and with
    out=data; a bad index, in the first block or near the end, is reported and leaves out
    unwritten. A sorted index and one whose updates crowd into a few targets (which keep one
    thread) agree too."""
    rng = np.random.default_rng(13)
    size = 20000
    n = (1 << 20) + 12347  # neither a multiple of the block nor of eight
    data = rng.standard_normal(size)
    indices = rng.integers(-size, size, n)
    updates = rng.standard_normal(n)
    crowded = np.minimum(rng.zipf(1.3, n) - 1, size - 1)
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    before = _list_width(width)
    mode = _core.set_fiber_split(1)
    def paths(itemsize=8, split=True):
        if threads == 1:
            return {}
        return split_paths(1, width, itemsize) if split else {"fiber_reader": 1}

    try:
        # The sorted index (negative values first) and the crowded one keep one thread and a reader.
        for index, split in ((indices, True), (np.sort(indices), False), (crowded, False)):
            want = _sequential(data, index, updates, reduction)
            for index_dtype in (np.int64, np.int32):
                with paths_taken() as taken:
                    got = sx.scatter_elements(data, index.astype(index_dtype), updates, reduction=reduction)
                np.testing.assert_array_equal(got, want)
                assert taken == paths(split=split)
            out = data.copy()
            with paths_taken() as taken:
                assert sx.scatter_elements(out, index, updates, reduction=reduction, out=out) is out
            np.testing.assert_array_equal(out, want)
            assert taken == paths(split=split)
        with paths_taken() as taken:
            got = sx.scatter_elements(data.astype(np.float32), indices, updates.astype(np.float32),
                                      reduction=reduction)
        assert got.tobytes() == _sequential(data.astype(np.float32), indices, updates.astype(np.float32),
                                            reduction).tobytes()
        assert taken == paths(itemsize=4)
        for at, bad in ((5, size), (n - 7, -size - 1)):
            wrong = indices.copy()
            wrong[at] = bad
            _bad_index_reported(data, wrong, at, updates, reduction)
    finally:
        _core.set_fiber_split(mode)
        _core.set_list_width(before)
        sx.set_num_threads(previous)


@pytest.mark.parametrize("width", _WIDTHS)
@pytest.mark.parametrize("dtype, reductions", [
    (np.int64, ["none", "add", "mul", "max", "min"]),
    (np.uint64, ["add", "max"]),
    (np.complex64, ["none", "add"]),
])
def test_one_long_fiber_split_eight_byte_updates(dtype, reductions, width):
    """Updates of eight bytes other than float64 through the split by targets (forced on, two
    threads), whose AVX-512 listing carries each listed update's bytes beside its target where it
    lists eight at a time ("512/8", as beyond INT32_MAX targets) and its element number where
    sixteen: int64 (products wrapping), uint64 and complex64, int64 and int32 indices, negative
    ones among them. The result is NumPy's one-at-a-time loop's bit for bit,
    with each listing the CPU has (`set_list_width`)."""
    rng = np.random.default_rng(15)
    # Longer than the 2**20 elements below which a fiber keeps one thread (kReadAheadMin); the
    # last block neither a whole block nor eight.
    size, n = 30000, (1 << 20) + 5
    real = rng.integers(-1000, 1000, size), rng.integers(-1000, 1000, n)
    if dtype == np.complex64:
        data = (real[0] + 1j * rng.integers(-9, 9, size)).astype(dtype)
        updates = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    else:
        data, updates = real[0].astype(dtype), real[1].astype(dtype)
    indices = rng.integers(-size, size, n)
    with _split_forced_on_two_threads(width):
        for reduction in reductions:
            want = _sequential(data, indices, updates, reduction).tobytes()
            for index in (indices, indices.astype(np.int32)):
                with paths_taken() as taken:
                    got = sx.scatter_elements(data, index, updates, reduction=reduction)
                assert got.tobytes() == want, (reduction, index.dtype)
                assert taken == split_paths(1, width, 8), (reduction, index.dtype)


@pytest.mark.parametrize("width", _WIDTHS)
@pytest.mark.parametrize("dtype, reductions", [
    (np.float64, ["none", "min"]),
    (np.float32, ["none", "add", "mul", "max"]),
    (np.int32, ["add", "mul", "min"]),
    (np.float16, ["add", "max"]),
    (np.uint8, ["none", "add"]),
    (np.complex128, ["add"]),
])
def test_one_long_fiber_split_int32_index(dtype, reductions, width):
    """An int32 index through the split by targets (forced on, two threads), which AVX-512's
    listing takes sixteen at a time, its targets as int32, beside each the update's bytes where
    it has 4 (float32, int32 wrapping) and the element's number otherwise (float64, float16,
    uint8 wrapping, complex128); eight at a time ("512/8", as beyond INT32_MAX targets) the
    bytes of 8 (float64) as well; negative indices among them. The result is NumPy's
    one-at-a-time loop's bit for bit with each listing the CPU has (`set_list_width`). A bad
    index (int32's least, or one past the end; in the first sixteen or in the last block's tail
    beyond the last sixteen) raises, naming it: into a new output, where the listing finds it,
    and into out=data, which is checked before anything is written and stays unwritten."""
    rng = np.random.default_rng(16)
    # Longer than the 2**20 elements below which a fiber keeps one thread (kReadAheadMin), into
    # more than the 64 KB of targets that the split needs (kSplitFiberBytes) for one byte each;
    # the last block one sixteen and five more.
    size, n = 70000, (1 << 20) + 21
    if np.issubdtype(dtype, np.integer):
        data, updates = rng.integers(0, 200, size).astype(dtype), rng.integers(0, 200, n).astype(dtype)
    else:
        data = rng.standard_normal(size).astype(dtype)
        updates = rng.uniform(0.5, 1.5, n).astype(dtype)
        if dtype == np.complex128:
            updates = updates + 1j * rng.standard_normal(n)
    indices = rng.integers(-size, size, n).astype(np.int32)
    with _split_forced_on_two_threads(width):
        for reduction in reductions:
            want = _sequential(data, indices, updates, reduction)
            out = data.copy()
            with paths_taken() as taken:
                got = sx.scatter_elements(data, indices, updates, reduction=reduction)
                assert sx.scatter_elements(out, indices, updates, reduction=reduction, out=out) is out
            assert got.tobytes() == want.tobytes(), reduction
            assert out.tobytes() == want.tobytes(), reduction
            assert taken == split_paths(2, width, data.itemsize), reduction
        for at, bad in ((3, np.iinfo(np.int32).min), (n - 2, size)):
            wrong = indices.copy()
            wrong[at] = bad
            with paths_taken() as taken, pytest.raises(IndexError, match=rf"index {bad} at indices\[{at}\]"):
                sx.scatter_elements(data, wrong, updates, reduction=reductions[0])
            # The listing found it, and the short path reported it at once (one call).
            assert taken == split_paths(1, width, data.itemsize)
            out = data.copy()
            with pytest.raises(IndexError, match=rf"index {bad} at indices\[{at}\]"):
                sx.scatter_elements(out, wrong, updates, reduction=reductions[0], out=out)
            assert out.tobytes() == data.tobytes()


@pytest.mark.parametrize("width", _WIDTHS)
def test_one_long_fiber_split_or_not_the_same_bits(width):
    """The split by targets (`set_fiber_split`: never, always, and by the CPU, which decides by
    the listing's width, the reduction, the type and the table's size) against the fiber on one
    thread with a reader, two threads, float16 and bfloat16 adds with an int32 index, float64
    products from a broadcast source, float32 max and float64 adds into 6e5 targets (4.8 MB):
    the same bits every way, with each listing the CPU has (`set_list_width`)."""
    rng = np.random.default_rng(14)
    size, n = 50000, (1 << 20) + 3
    cases = [
        (rng.standard_normal(size).astype(np.float16), rng.integers(0, size, n).astype(np.int32),
         rng.standard_normal(n).astype(np.float16), "add"),
        (np.broadcast_to(np.float64(1.5), (size,)), rng.integers(-size, size, n),
         rng.uniform(0.5, 1.5, n), "mul"),
        (rng.standard_normal(size).astype(np.float32), rng.integers(0, size, n),
         rng.standard_normal(n).astype(np.float32), "max"),
        (rng.standard_normal(size).astype(ml_dtypes.bfloat16), rng.integers(0, size, n).astype(np.int32),
         rng.standard_normal(n).astype(ml_dtypes.bfloat16), "add"),
        (rng.standard_normal(12 * size), rng.integers(0, 12 * size, n), rng.standard_normal(n), "add"),
    ]
    previous = sx.get_num_threads()
    sx.set_num_threads(2)
    listing = _list_width(width)
    try:
        for data, index, updates, reduction in cases:
            want = _sequential(np.array(data), index, updates, reduction).tobytes()
            split = split_paths(1, width, data.itemsize)
            for mode, paths in ((0, [{"fiber_reader": 1}]), (1, [split]), (2, [{"fiber_reader": 1}, split])):
                before = _core.set_fiber_split(mode)
                try:
                    with paths_taken() as taken:
                        got = sx.scatter_elements(data, index, updates, reduction=reduction)
                finally:
                    _core.set_fiber_split(before)
                assert got.tobytes() == want, (reduction, mode)
                assert taken in paths, (reduction, mode)
    finally:
        _core.set_list_width(listing)
        sx.set_num_threads(previous)


@pytest.mark.parametrize("width", [0, 512])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_sorted_fiber_split_by_positions(threads, reduction, width):
    """A long 1-D fiber whose targets ascend (a sorted index) is split by positions between two
    threads at a change of target, after each has checked its half. The result is the sequential
    loop's bit for bit and the same as with the split turned off (`set_fiber_by_positions`), with
    a new output and with out=data, for int64 and int32 indices; indices that ascend only at
    first, or written negatively, or whose second half is one run, or that hold a bad index near
    the end (reported, out=data left unwritten), are right too. The check of each half goes
    sixteen or eight indices at a time (`set_list_width(512)`, where the CPU has AVX-512F) or one
    at a time."""
    rng = np.random.default_rng(17)
    size, n = 30000, (1 << 20) + 5
    updates = rng.uniform(0.99, 1.01, n) if reduction == "mul" else rng.standard_normal(n)
    data = rng.standard_normal(size)
    ascending = np.sort(rng.integers(0, size, n))
    half = np.concatenate([ascending[: n // 2], rng.integers(0, size, n - n // 2)])
    negative = np.where(rng.random(n) < 0.1, ascending - size, ascending)
    one_run = np.concatenate([ascending[: n // 3], np.full(n - n // 3, size - 1)])
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    listing = _list_width(width)
    try:
        # Only the indices that ascend throughout, none of them negative (`ascends` in kernels.h),
        # are split; the others, and every index with the split off, keep one thread and a reader
        # (their first indices crowd into the low targets).
        for index, ascends in ((ascending, True), (half, False), (negative, False), (one_run, False)):
            want = _sequential(data, index, updates, reduction)
            for index_dtype in (np.int64, np.int32):
                got, taken = {}, {}
                for split in (False, True):
                    before = _core.set_fiber_by_positions(split)
                    try:
                        with paths_taken() as taken[split]:
                            got[split] = sx.scatter_elements(data, index.astype(index_dtype), updates,
                                                             reduction=reduction)
                    finally:
                        _core.set_fiber_by_positions(before)
                assert got[True].tobytes() == want.tobytes()
                assert got[False].tobytes() == want.tobytes()
                if threads == 1:
                    assert taken == {False: {}, True: {}}
                else:
                    assert taken == {False: {"fiber_reader": 1},
                                     True: {"fiber_by_positions": 1} if ascends else {"fiber_reader": 1}}
            out = data.copy()
            sx.scatter_elements(out, index, updates, reduction=reduction, out=out)
            assert out.tobytes() == want.tobytes()
        wrong = ascending.copy()
        wrong[n - 100] = size
        _bad_index_reported(data, wrong, n - 100, updates, reduction)
    finally:
        _core.set_list_width(listing)
        sx.set_num_threads(previous)


@pytest.mark.parametrize("reduction", ["add", "mul"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_sorted_16bit_floats_in_chains(dtype, reduction):
    """The halves of a sorted fiber split by positions apply float16 and bfloat16 adds and
    products in four chains side by side, each window of updates cut at changes of target
    (`set_ascending_chains`). Each target still gets its updates in order: NumPy's ordered loop
    bit for bit, and the element loop's, with a new output and with out=data, for runs of about
    35 updates, runs longer than the reach of a cut (into 100 targets) and so across windows,
    mostly single updates (into two million targets), and runs of 1 to 200 mixed."""
    rng = np.random.default_rng(23)
    n = (1 << 20) + 5
    if reduction == "mul":
        spread = 0.001 if dtype == np.float16 else 0.01
        updates = rng.uniform(1 - spread, 1 + spread, n).astype(dtype)
    else:
        updates = rng.standard_normal(n).astype(dtype)
    mixed = np.repeat(np.arange(n // 50), rng.integers(1, 201, n // 50))[:n]
    assert mixed.size == n
    indices = {
        30000: np.sort(rng.integers(0, 30000, n)),
        100: np.sort(rng.integers(0, 100, n)),
        2_000_000: np.sort(rng.integers(0, 2_000_000, n)),
        int(mixed[-1]) + 1: mixed,
    }
    previous = sx.get_num_threads()
    sx.set_num_threads(2)
    try:
        for size, index in indices.items():
            data = rng.standard_normal(size).astype(dtype)
            want = _sequential(data, index, updates, reduction)
            got = {}
            for chains in (False, True):
                before = _core.set_ascending_chains(chains)
                try:
                    with paths_taken() as taken:
                        got[chains] = sx.scatter_elements(data, index, updates, reduction=reduction)
                        out = data.copy()
                        sx.scatter_elements(out, index, updates, reduction=reduction, out=out)
                finally:
                    _core.set_ascending_chains(before)
                assert out.tobytes() == want.tobytes(), (size, chains)
                assert taken == {"fiber_by_positions": 2, **({"ascending_chains": 2} if chains else {})}, size
            assert got[True].tobytes() == want.tobytes(), size
            assert got[False].tobytes() == want.tobytes(), size
    finally:
        sx.set_num_threads(previous)


# The ways float16 adds and products go element by element, each as (fp16 arith, F16C arith):
# AVX512-FP16's own instructions where the CPU has them, before F16C's conversions, before the
# conversions written in C++.
F16_WAYS = {"fp16": (True, True), "f16c": (False, True), "c++": (False, False)}


@contextlib.contextmanager
def _f16_ways():
    """Yields `use(way)`, which sets `set_fp16_arith` and `set_f16c_arith` for one of F16_WAYS and
    returns whether the CPU (and the build) lets that way run; puts both settings back after."""
    before = _core.set_fp16_arith(True), _core.set_f16c_arith(True)

    def use(way):
        fp16, f16c = F16_WAYS[way]
        _core.set_f16c_arith(f16c)
        _core.set_fp16_arith(fp16)
        return _core.set_fp16_arith(fp16) == fp16 and _core.set_f16c_arith(f16c) == f16c

    try:
        yield use
    finally:
        _core.set_f16c_arith(before[1])
        _core.set_fp16_arith(before[0])


@pytest.mark.parametrize("reduction", ["add", "mul"])
def test_float16_arithmetic_by_f16c_for_every_update(reduction):
    """float16 adds and products element by element go by AVX512-FP16's own instructions where
    the CPU has them (`set_fp16_arith`), else convert by F16C's (`set_f16c_arith`), else by the
    conversions written in C++. For 256 current values (zeros and subnormals of both signs, the
    largest finite values, infinities, NaNs of both signs and several payloads, random bit
    patterns) against every float16 as the update, each way the CPU has gives NumPy's float16
    values, and the same bits as the C++ way where not both are NaN; of two NaNs the
    instructions' ways give the update's, quieted, as the vector rows do (payloads lie outside
    the bitwise promise)."""
    rng = np.random.default_rng(29)
    special = SPECIAL_BITS[np.float16] + [0x3FF, 0x83FF, 0x400, 0x8400, 0x3C00, 0xFC01, 0x7DFF, 0x7E01, 0x7FFF, 0xFFFF]
    currents = np.concatenate([special, rng.integers(0, 1 << 16, 256 - len(special))]).astype(np.uint16)
    order = rng.permutation(1 << 16)  # the update at position k, bit pattern order[k], targets order[k]
    updates = order.astype(np.uint16).view(np.float16)
    every = np.arange(1 << 16, dtype=np.uint16)
    ufunc = {"add": np.add, "mul": np.multiply}[reduction]

    def is_nan(bits):
        return (bits & 0x7C00 == 0x7C00) & (bits & 0x3FF != 0)

    with _f16_ways() as use:
        ways = [way for way in F16_WAYS if use(way)]
        assert "c++" in ways
        for current in currents:
            data = np.full(1 << 16, current, np.uint16).view(np.float16)
            got = {}
            for way in ways:
                use(way)
                got[way] = sx.scatter_elements(data, order, updates, reduction=reduction).view(np.uint16)
            with np.errstate(all="ignore"):
                want = ufunc(data, every.view(np.float16))
            both_nan = is_nan(current) & is_nan(every)
            for way in ways:
                np.testing.assert_array_equal(got[way].view(np.float16), want)  # NaN matches NaN
                np.testing.assert_array_equal(got[way][~both_nan], got["c++"][~both_nan])
                if way != "c++" and is_nan(current):
                    np.testing.assert_array_equal(got[way][both_nan], every[both_nan] | 0x200)


@pytest.mark.parametrize("reduction", ["add", "mul"])
def test_float16_arithmetic_by_f16c_along_the_paths(reduction):
    """The element paths that float16 adds and products take, by each way the CPU has
    (`_f16_ways`: AVX512-FP16, F16C, C++), against NumPy's ordered loop bit for bit: a long
    1-D fiber of random targets (split by targets between two threads), a sorted one (split by
    positions, runs in chains), and fibers along the last axis of a 2-D array."""
    rng = np.random.default_rng(31)
    n = (1 << 20) + 5

    def values(shape):
        if reduction == "mul":
            return rng.uniform(0.999, 1.001, shape).astype(np.float16)
        return rng.standard_normal(shape).astype(np.float16)

    cases = [
        (rng.standard_normal(100_000).astype(np.float16), rng.integers(0, 100_000, n), values(n), 0),
        (rng.standard_normal(30_000).astype(np.float16), np.sort(rng.integers(0, 30_000, n)), values(n), 0),
        (rng.standard_normal((300, 500)).astype(np.float16), rng.integers(-500, 500, (300, 800)),
         values((300, 800)), 1),
    ]
    with _f16_ways() as use:
        ways = [way for way in F16_WAYS if use(way)]
    calls = len(ways)
    # Without vectors to list by, the random fiber keeps one thread and a reader (fiber_split_pays).
    width = _default_list_width()
    paths = [split_paths(calls, width, 2) if width else {"fiber_reader": calls},
             {"fiber_by_positions": calls, "ascending_chains": calls}, {}]
    previous = sx.get_num_threads()
    sx.set_num_threads(2)
    try:
        for (data, index, updates, axis), path in zip(cases, paths):
            if axis == 0:
                want = _sequential(data, index, updates, reduction)
            else:
                want = _sequential_axis0(data.T.copy(), index.T.copy(), updates.T.copy(), reduction).T
            with paths_taken() as taken, _f16_ways() as use:
                for way in ways:
                    assert use(way)
                    got = sx.scatter_elements(data, index, updates, axis=axis, reduction=reduction)
                    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (data.shape, way)
            assert taken == path, data.shape
    finally:
        sx.set_num_threads(previous)


def _runs(rng, n, size, longest):
    """n indices into `size` targets in runs of 1 to `longest` equal values, a tenth of them
    written negatively (the same target, another value: a run ends there)."""
    index = np.repeat(rng.integers(0, size, n), rng.integers(1, longest + 1, n))[:n]
    return np.where(rng.random(n) < 0.1, index - size, index)


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_runs_of_equal_indices_in_a_fiber(threads, reduction, ahead):
    """A sorted index (segment sums) brings runs of equal indices, which a contiguous fiber
    applies a run at a time, the target in a register: the result is still the element loop's
    bit for bit. Short fibers against the oracle (float64 and float16, NaNs among the updates,
    int64 and int32 indices); a long one (a second thread reading ahead) against NumPy's
    ordered loop; a bad index inside a run is reported and, with out=data, nothing is written.
    With the streams asked for ahead and without (`set_fiber_streams_ahead`)."""
    rng = np.random.default_rng(15)
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    before = _core.set_fiber_streams_ahead(ahead)
    try:
        for dtype in (np.float64, np.float16):
            index = _runs(rng, 3000, 50, 40)
            updates = rng.uniform(0.9, 1.1, 3000).astype(dtype)
            updates[rng.random(3000) < 0.02] = np.nan
            data = rng.standard_normal(50).astype(dtype)
            want = oracle.scatter_elements(data, index, updates, 0, reduction)
            for width in (np.int64, np.int32):
                got = sx.scatter_elements(data, index.astype(width), updates, reduction=reduction)
                assert got.tobytes() == want.tobytes()
        n = (1 << 20) + 77
        index = _runs(rng, n, 1000, 300)
        updates = rng.uniform(0.99, 1.01, n) if reduction == "mul" else rng.standard_normal(n)
        data = rng.standard_normal(1000)
        want = _sequential(data, index, updates, reduction)
        with paths_taken() as taken:
            got = sx.scatter_elements(data, index, updates, reduction=reduction)
        np.testing.assert_array_equal(got, want)
        assert taken == ({"fiber_reader": 1} if threads == 2 else {})
        wrong = index.copy()
        at = np.flatnonzero(wrong[1:] == wrong[:-1])[len(wrong) // 3]  # inside a run
        wrong[at] = 1000
        _bad_index_reported(data, wrong, at, updates, reduction)
        # More targets than the cache holds (2.4 MB): stretches of runs between stretches of
        # random targets, the runs' targets in the first and last quarter (so that two threads
        # keep the fiber whole, one applying it).
        far = 300_000
        runs = (np.arange(n) // 4096) % 2 == 0
        index = np.where(runs, _runs(rng, n, far // 4, 300), rng.integers(0, far, n))
        data = rng.standard_normal(far)
        want = _sequential(data, index, updates, reduction)
        with paths_taken() as taken:
            got = sx.scatter_elements(data, index, updates, reduction=reduction)
        np.testing.assert_array_equal(got, want)
        assert taken == ({"fiber_reader": 1} if threads == 2 else {})
    finally:
        _core.set_fiber_streams_ahead(before)
        sx.set_num_threads(previous)


def _signed_zeros_and_nans(rng, n, dtype, sign):
    """n values of a float dtype, mostly zeros of either sign and numbers of the given sign, a
    few NaNs of three payloads (quiet, with sign bit or not): the values whose choice by max or
    min depends on the order of a run (which zero, which NaN comes first)."""
    bits, quiet, sign_bit = {np.float16: (np.uint16, 0x7E00, 1 << 15),
                             ml_dtypes.bfloat16: (np.uint16, 0x7FC0, 1 << 15),
                             np.float32: (np.uint32, 0x7FC00000, 1 << 31),
                             np.float64: (np.uint64, 0x7FF8 << 48, 1 << 63)}[dtype]
    payloads = np.array([quiet | 1, quiet | 2, quiet | 3 | sign_bit], bits)
    values = np.where(rng.random(n) < 0.5, rng.choice([0.0, -0.0], n), sign * rng.uniform(1, 4, n))
    values = values.astype(dtype)
    nan_at = rng.random(n) < 0.01
    raw = values.view(bits)
    raw[nan_at] = rng.choice(payloads, nan_at.sum())
    return values


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
                                   np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_long_runs_folded_in_chains(dtype, reduction):
    """Runs of 16 equal indices and more fold their updates in several chains side by side, then
    the chains' results in order, where the reduction regroups bit for bit: max and min of every
    type, adds and products of integers (wrapping) and booleans; a float or double max or min
    finds its run's first NaN, else its extreme, else the first zero. The result is the ordered
    loop's bit for bit (NumPy's, or for a float max or min the oracle's): which of two equal
    zeros a max keeps, which NaN (of three payloads) comes first, integer overflow. Float adds
    and products, which do not regroup, are here too."""
    rng = np.random.default_rng(16)
    size = 600  # each target gets one run, so each run's result shows (a tie keeps the target)
    targets = np.where(rng.random(size) < 0.2, -size, 0) + rng.permutation(size)
    index = np.repeat(targets, rng.integers(1, 65, size))
    n = len(index)
    if np.issubdtype(dtype, np.floating) or dtype is ml_dtypes.bfloat16:
        sign = -1.0 if reduction == "max" else 1.0
        updates = _signed_zeros_and_nans(rng, n, dtype, sign)
        data = (sign * rng.uniform(5, 6, size)).astype(dtype)  # beyond every update
        if reduction in ("add", "mul"):
            updates = rng.uniform(0.9, 1.1, n).astype(dtype)
    elif dtype is np.bool_:
        updates, data = rng.random(n) < 0.9, rng.random(size) < 0.5
    else:
        info = np.iinfo(dtype)
        updates = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        data = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
    if reduction in ("max", "min") and np.dtype(dtype).kind not in "iub":
        # NumPy's maximum takes the second of two equal zeros (test_peers.py); the oracle
        # keeps the current value, as the spec does.
        want = oracle.scatter_elements(data, index, updates, 0, reduction)
    else:
        want = _sequential(data, index, updates, reduction)
    for width in (np.int64, np.int32):
        got = sx.scatter_elements(data, index.astype(width), updates, reduction=reduction)
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape", [(64, 1000), (8, 4099)])
def test_output_just_after_data_modulo_4k(shape):
    """An output 16 bytes after data modulo 4 KiB (as glibc places an allocation right after
    another) is copied by blocks instead of memcpy; rows that are not a whole number of blocks
    included, through the fused and the separate copy of data."""
    rng = np.random.default_rng(13)
    n = shape[0] * shape[1]
    buffer = np.zeros(2 * n + 3 * 1024, np.float32)
    start = (-buffer.ctypes.data % 4096) // 4
    data = buffer[start : start + n].reshape(shape)
    data[...] = rng.standard_normal(shape)
    out_start = start + -(-n // 1024) * 1024 + 4  # the next 4 KiB boundary after data, + 16 bytes
    out = buffer[out_start : out_start + n].reshape(shape)
    assert (out.ctypes.data - data.ctypes.data) % 4096 == 16
    for rows in (shape[0], shape[0] - 1):  # every fiber visited (fused copy) or not
        indices = rng.integers(0, shape[1], (rows, 300))
        updates = rng.standard_normal((rows, 300)).astype(np.float32)
        want = data.copy()
        np.add.at(want, (np.arange(rows)[:, None], indices), updates)
        sx.scatter_elements(data, indices, updates, axis=1, reduction="add", out=out)
        np.testing.assert_array_equal(out, want)


def _special_values(dtype, shape, rng):
    """Values whose order of application shows in the result: NaNs with different payloads,
    signed zeros, infinities and many ties (floats); wrapping products and sums (integers)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.3
    if dtype.kind in "iu":
        return rng.integers(0, 7, shape).astype(dtype) * dtype.type(37)
    x = rng.integers(-3, 4, shape).astype(np.float32) / 2  # ties and both zeros
    x[x == 0] *= np.where(rng.random(int((x == 0).sum())) < 0.5, -1, 1)
    x.flat[rng.integers(0, x.size, 40)] = np.inf
    x.flat[rng.integers(0, x.size, 40)] = -np.inf
    x = x.astype(dtype)
    bits = x.view(np.uint16 if dtype.itemsize == 2 else np.uint32 if dtype.itemsize == 4 else np.uint64)
    quiet = {2: 0x7E00 if dtype == np.float16 else 0x7FC0, 4: 0x7FC00000, 8: 0x7FF8000000000000}[dtype.itemsize]
    for payload in range(1, 30):  # distinct quiet NaNs, so that which one wins is visible
        bits.flat[rng.integers(0, x.size)] = quiet | payload
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("reduction", ["max", "min", "add", "mul"])
def test_order_visible_values_in_wide_rows(dtype, reduction):
    """A few wide rows (axis 0, 32 columns, 4000 rows of indices), large enough for the threads
    to share out the fibers, with values whose order of application shows: the result must be
    the sequential one bit for bit -- which NaN wins, the sign of a zero tie (max and min select
    without branches) -- against NumPy's one-by-one ufunc.at, the literal oracle and one
    thread, through the fused copy of data, the separate copy (index narrower than data),
    out=data, and a non-contiguous out."""
    rng = np.random.default_rng(21)
    data = _special_values(dtype, (2000, 32), rng)
    ufunc = UFUNCS[reduction]
    if np.dtype(dtype) == np.bool_:
        ufunc = {"add": np.logical_or, "mul": np.logical_and, "max": np.logical_or, "min": np.logical_and}[reduction]
    previous = sx.get_num_threads()
    try:
        for ishape in [(4000, 32), (4000, 20)]:
            indices = rng.integers(-2000, 2000, ishape)
            updates = _special_values(dtype, ishape, rng)
            want = data.copy()
            index = (np.where(indices < 0, indices + 2000, indices), np.arange(ishape[1])[None, :])
            with np.errstate(all="ignore"):
                ufunc.at(want, index, updates)
            results = {}
            for threads in (1, 2, 3):
                sx.set_num_threads(threads)
                got = sx.scatter_elements(data, indices, updates, axis=0, reduction=reduction)
                results[threads] = got
                out = data.copy()
                sx.scatter_elements(out, indices, updates, axis=0, reduction=reduction, out=out)
                strided = np.asfortranarray(data)
                sx.scatter_elements(strided, indices, updates, axis=0, reduction=reduction, out=strided)
                for r in (out, strided):
                    np.testing.assert_array_equal(np.ascontiguousarray(r).view(np.uint8), got.view(np.uint8))
            for threads in (2, 3):
                np.testing.assert_array_equal(results[threads].view(np.uint8), results[1].view(np.uint8))
            # NumPy's ufuncs do not promise which NaN or which zero of a tie they return (the
            # indexed loop of np.maximum.at keeps -0 over +0 in some lanes): values only.
            np.testing.assert_array_equal(results[1].astype(np.float64), want.astype(np.float64))
            if np.dtype(dtype).kind == "f" and ishape == (4000, 20) and reduction in ("max", "min"):
                # Bit for bit against the literal SPEC oracle, NaN payloads and zero signs too.
                literal = oracle.scatter_elements(data, indices, updates, axis=0, reduction=reduction)
                np.testing.assert_array_equal(results[2].view(np.uint8), literal.view(np.uint8))
    finally:
        sx.set_num_threads(previous)


def _scatter_both_ways(data, indices, updates, reduction, want):
    """Scatters along axis 0 into a new output and with out=data; both must be `want` bit for
    bit. Returns the new output."""
    got = sx.scatter_elements(data, indices, updates, axis=0, reduction=reduction)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    out = data.copy()
    sx.scatter_elements(out, indices, updates, axis=0, reduction=reduction, out=out)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int32])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_broadcast_index_rows_split_by_destination(dtype, reduction):
    """A stride-0 index row (the expanded index of message passing as a broadcast view) lets the
    threads split the target rows instead of the columns: each applies whole rows, in order,
    to its own targets; one thread, on a large call, lists and applies all rows the same way.
    Against ufunc.at bit for bit and against one thread, for 2 and 3 threads, negative indices,
    the fused copy and the separate one (index narrower than data), out=data, and a bad index
    on 1, 2 and 3 threads (with out=data, nothing written)."""
    rng = np.random.default_rng(23)
    data = (rng.standard_normal((3000, 40)) * 3).astype(dtype)
    rows = rng.integers(-3000, 3000, 20000)
    previous = sx.get_num_threads()
    try:
        for width in (40, 25):
            updates = (rng.standard_normal((20000, width)) * 3).astype(dtype)
            if reduction == "mul":
                updates = (1 + rng.standard_normal((20000, width)) / 50).astype(dtype)
            indices = np.broadcast_to(rows[:, None], updates.shape)
            want = _sequential_axis0(data, indices, updates, reduction)
            bad = rows.copy()
            bad[15000] = 3000
            results = []
            for threads in (1, 2, 3):
                sx.set_num_threads(threads)
                with paths_taken() as taken:
                    results.append(_scatter_both_ways(data, indices, updates, reduction, want))
                assert taken == {"rows_by_target": 2}, (width, threads)
                out = data.copy()
                for target in (None, out):
                    with pytest.raises(IndexError, match=r"index 3000 at indices\[15000, 0\]"):
                        sx.scatter_elements(data if target is None else out, np.broadcast_to(bad[:, None], updates.shape),
                                            updates, axis=0, reduction=reduction, out=target)
                np.testing.assert_array_equal(out.view(np.uint8), data.view(np.uint8))  # nothing written
    finally:
        sx.set_num_threads(previous)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("layout", ["contiguous", "rows_apart", "transposed"])
def test_rows_of_one_target_copy_data_of_any_layout(restore_threads, threads, layout):
    """The rows-of-one-target walk copies each thread's target rows of data first: in one piece
    where the rows lie end to end, row by row where they do not (a slice of wider rows, a
    transposed array). Bit for bit the sequential result, and data untouched."""
    sx.set_num_threads(threads)
    rng = np.random.default_rng(31)
    wide = rng.standard_normal((3000, 48)).astype(np.float32)
    data = {"contiguous": np.ascontiguousarray(wide[:, :40]), "rows_apart": wide[:, :40],
            "transposed": np.ascontiguousarray(wide[:, :40].T).T}[layout]
    before = data.copy()
    updates = rng.standard_normal((20000, 40)).astype(np.float32)
    rows = rng.integers(-3000, 3000, 20000)
    indices = np.broadcast_to(rows[:, None], updates.shape)
    with paths_taken() as taken:
        got = sx.scatter_elements(data, indices, updates, axis=0, reduction="add")
    assert taken == {"rows_by_target": 1}
    np.testing.assert_array_equal(got.view(np.uint8), _sequential_axis0(before, indices, updates, "add").view(np.uint8))
    np.testing.assert_array_equal(data, before)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("shape", ["fiber", "rows", "one_target_rows"])
@pytest.mark.parametrize("misaligned", [False, True])
def test_gather_by_streaming_stores(streaming_outputs, restore_threads, threads, dtype, shape, misaligned):
    # Every path of the gather that streams (elements of 4, 8 and 16 bytes; 1 and 2 store as
    # usual), against NumPy: one long contiguous fiber, rows of random indices along axis 0, and
    # rows of one target (a stride-0 index row), into an output that starts 16-byte aligned or not.
    sx.set_num_threads(threads)
    rng = np.random.default_rng(11)
    if shape == "fiber":
        data = (rng.standard_normal(5000) * 50).astype(dtype)
        indices = rng.integers(-5000, 5000, 100_003)
        axis = 0
    else:
        data = (rng.standard_normal((300, 37)) * 50).astype(dtype)
        axis = 0
        if shape == "rows":
            indices = rng.integers(-300, 300, (4001, 37))
        else:
            indices = np.broadcast_to(rng.integers(-300, 300, (4001, 1)), (4001, 37))
    want = np.take_along_axis(data, indices, axis)
    buffer = np.zeros(want.size + 1, dtype)
    out = buffer[1:] if misaligned else buffer[:-1]
    out = out.reshape(want.shape)
    got = sx.gather_elements(data, indices, axis, out=out)
    assert got is out
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert buffer[0 if misaligned else -1] == 0  # nothing written outside out


@pytest.mark.parametrize("streaming_outputs", ["off", "wide", "narrow"], indirect=True)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("rows", ["random", "one_target"])
def test_gather_of_random_rows_beyond_the_cache(streaming_outputs, restore_threads, threads, index_dtype, rows):
    """Rows of random indices along axis 0 into a table larger than kCacheBytes (2 MB), whose
    source elements (or, for rows of one target, a stride-0 index row, whose whole source rows:
    gather_whole_rows) are prefetched a few rows ahead: negative indices among them, and one
    out of bounds in a row that an earlier row prefetches for (it is skipped there and raises).
    With plain stores (this size, "off") the random rows' elements are asked for in a loop of
    their own; written by streaming stores, four at a time within the gather of an earlier row
    (stream_gather_rows), up to the rows whose own later row lies beyond the thread's last."""
    sx.set_num_threads(threads)
    rng = np.random.default_rng(41)
    data = rng.standard_normal((20_000, 40)).astype(np.float32)  # 3.2 MB
    if rows == "random":
        indices = rng.integers(-20_000, 20_000, (30_001, 40)).astype(index_dtype)
    else:
        column = rng.integers(-20_000, 20_000, (30_001, 1)).astype(index_dtype)
        indices = np.broadcast_to(column, (30_001, 40))
    want = np.take_along_axis(data, indices, 0)
    with paths_taken() as taken:
        got = sx.gather_elements(data, indices, 0)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    streamed = {"gather_stream": 1} if streaming_outputs else {}
    assert taken == {"gather_far_rows" if rows == "random" else "gather_whole_rows": 1, **streamed}
    if rows == "random":
        indices = indices.copy()
        indices[29_999, 7] = -20_001
        where = r"indices\[29999, 7\]"
    else:
        column = column.copy()
        column[29_999, 0] = -20_001
        indices = np.broadcast_to(column, (30_001, 40))
        where = r"indices\[29999, 0\]"
    with pytest.raises(IndexError, match=r"index -20001 at " + where):
        sx.gather_elements(data, indices, 0)


@pytest.mark.parametrize("streaming_outputs", ["off", "wide", "narrow"], indirect=True)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("size", [10_007, 5, 63])
def test_gather_of_a_fiber_from_a_source_beyond_the_cache(streaming_outputs, restore_threads, threads, index_dtype,
                                                          size):
    """A contiguous fiber gathered from a source larger than kFiberGatherFarBytes (8 MiB) asks for
    the source element kFiberGatherAhead (32) indices on (gather_fiber): negative and out-of-bounds
    indices among those asked for, fibers shorter than that distance, the last elements of a fiber
    (none lies ahead of them) and, with streaming stores, runs of 64 elements that end within 32
    of the fiber's end. A bad index in the first or the last 32 raises and writes nothing."""
    sx.set_num_threads(threads)
    rng = np.random.default_rng(43)
    data = rng.standard_normal(1_100_000)  # 8.8 MB
    indices = rng.integers(-1_100_000, 1_100_000, size).astype(index_dtype)
    want = np.take_along_axis(data, indices, 0)
    with paths_taken() as taken:
        got = sx.gather_elements(data, indices, 0)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert taken == {"gather_far_fiber": 1, **({"gather_stream": 1} if streaming_outputs else {})}
    out = np.full(size, 7.0)
    np.testing.assert_array_equal(sx.gather_elements(data, indices, 0, out=out).view(np.uint8), want.view(np.uint8))
    for at in sorted({0, max(0, size - 40), size - 1}):
        bad = indices.copy()
        bad[at] = 1_100_000  # asked for ahead as the first element, then skipped and reported
        out = np.full(size, 7.0)
        with pytest.raises(IndexError, match=rf"index 1100000 at indices\[{at}\]"):
            sx.gather_elements(data, bad, 0, out=out)
        assert (out == 7.0).all()
        with paths_taken() as taken, pytest.raises(IndexError, match=rf"index 1100000 at indices\[{at}\]"):
            sx.gather_elements(data, bad, 0)
        # The gather found it, and the short path reported it at once (one call).
        assert taken == {"gather_far_fiber": 1, **({"gather_stream": 1} if streaming_outputs else {})}


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("columns", [50, 300])
def test_streaming_gather_along_a_middle_axis(streaming_outputs, restore_threads, threads, dtype, index_dtype,
                                              columns):
    """The gather along an outer axis gathers a row's elements a run of 512 bytes at a time into
    a buffer that streaming stores write out (stream_gather_rows): rows of 50 (one run, not a
    multiple of four) and of 300 (several runs: 128 float32 or 64 float64 each), negative indices
    among them, into an output aligned or one element off; a bad index in a later run of a row
    is skipped there and raises."""
    sx.set_num_threads(threads)
    rng = np.random.default_rng(17)
    data = (rng.standard_normal((6, 80, columns)) * 100).astype(dtype)
    indices = rng.integers(-80, 80, (6, 41, columns)).astype(index_dtype)
    want = np.take_along_axis(data, indices, 1)
    for offset in (0, 1):
        buffer = np.zeros(want.size + 1, dtype)
        out = buffer[offset:offset + want.size].reshape(want.shape)
        got = sx.gather_elements(data, indices, 1, out=out)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        assert buffer[want.size if offset == 0 else 0] == 0  # nothing written outside out
    column = columns - 3
    indices[4, 17, column] = 80
    with pytest.raises(IndexError, match=rf"index 80 at indices\[4, 17, {column}\]"):
        sx.gather_elements(data, indices, 1)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("columns", [3, 40, 130])
def test_streaming_gather_of_rows_runs_across_rows(streaming_outputs, restore_threads, threads, index_dtype,
                                                   columns):
    """The streamed gather along an outer axis writes up to kWholeRows (32) consecutive rows of
    several values as one run of elements (stream_gather_rows): runs of 512 bytes that end
    within a row and go on in the next (rows of 3, 40 and 130 float32, none dividing a run),
    into an output that starts at every 4-byte offset of a line, and into one whose rows lie
    apart (every other row of a buffer: a row per call); a row of one value among them ends the
    rows of a call (it goes to gather_whole_rows), as does the 32nd row; nothing is written
    outside the output; a bad index in a row within a call's rows is skipped there and raises."""
    sx.set_num_threads(threads)
    rng = np.random.default_rng(43)
    data = rng.standard_normal((300, columns)).astype(np.float32)
    indices = rng.integers(-300, 300, (181, columns)).astype(index_dtype)
    for row in (5, 6, 7, 50, 120, 180):  # rows of one value: alone, three together, the last
        indices[row] = indices[row, 0]
    want = np.take_along_axis(data, indices, 0)
    for step in range(16):
        raw = np.zeros(want.nbytes + 128, np.uint8)
        start = (-raw.ctypes.data) % 64 + 4 * step
        out = raw[start:start + want.nbytes].view(np.float32).reshape(want.shape)
        got = sx.gather_elements(data, indices, 0, out=out)
        assert got is out
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        assert not raw[:start].any() and not raw[start + want.nbytes:].any()
    apart = np.zeros((2 * want.shape[0], columns), np.float32)
    got = sx.gather_elements(data, indices, 0, out=apart[::2])
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert not apart[1::2].any()
    bad = 70  # the 10th of the rows 51-82 that one call gathers on one thread
    indices[bad, 1] = 300
    with pytest.raises(IndexError, match=rf"index 300 at indices\[{bad}, 1\]"):
        sx.gather_elements(data, indices, 0)


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("shape", ["fiber", "rows"])
def test_streaming_gather_into_every_offset_of_a_line(streaming_outputs, dtype, shape):
    """A streamed gather's runs after the first start on a line of the output (stream_runs):
    outputs that start at every element offset in a 64-byte line (for complex128 also at the
    8-byte offsets that are no multiple of its size), fibers and rows longer than a run and one
    shorter, against NumPy; nothing is written outside the output."""
    rng = np.random.default_rng(29)
    item = np.dtype(dtype).itemsize
    if shape == "fiber":
        data = (rng.standard_normal(700) * 50).astype(dtype)
        indices, axis = rng.integers(-700, 700, 1500), 0
    else:
        data = (rng.standard_normal((40, 700)) * 50).astype(dtype)
        indices, axis = rng.integers(-40, 40, (3, 700)), 0
    short = indices[..., :5]
    table = data if shape == "fiber" else data[:, :5]  # NumPy takes an index as wide as the table
    cases = [(indices, np.take_along_axis(data, indices, axis)), (short, np.take_along_axis(table, short, axis))]
    steps = [8 * k for k in range(8)] if item == 16 else [item * k for k in range(64 // item)]
    for index, wanted in cases:
        for step in steps:
            raw = np.zeros(wanted.nbytes + 128, np.uint8)
            start = (-raw.ctypes.data) % 64 + step
            out = raw[start:start + wanted.nbytes].view(dtype).reshape(wanted.shape)
            if not out.flags.aligned:
                continue
            got = sx.gather_elements(data, index, axis, out=out)
            np.testing.assert_array_equal(got.view(np.uint8), wanted.view(np.uint8))
            assert not raw[:start].any() and not raw[start + wanted.nbytes:].any()


def test_streaming_gather_with_a_bad_index_raises(streaming_outputs):
    data = np.arange(1000, dtype=np.float64)
    indices = np.zeros(200_000, np.int64)
    indices[123_457] = 1000
    with pytest.raises(IndexError, match="123457"):
        sx.gather_elements(data, indices)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.complex128, np.int32])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
@pytest.mark.parametrize("layout", ["C", "reversed"])
def test_scatter_staged_in_a_scratch(streaming_outputs, restore_threads, threads, dtype, reduction, layout):
    # A middle-axis scatter whose fused copy goes block by block through a scratch and out by
    # streaming stores (stage_rows): against NumPy's one-by-one ufunc.at (the sequential order)
    # and the literal oracle for "none", for every thread count; a bad index still raises.
    if reduction == "max" and dtype == np.complex128:
        pytest.skip("max is not defined for complex")
    sx.set_num_threads(threads)
    rng = np.random.default_rng(5)
    data = (rng.standard_normal((12, 90, 70)) * 4).astype(dtype)
    if layout == "reversed":
        data = data[::-1, :, ::-1]
    indices = rng.integers(-90, 90, (12, 160, 70))
    updates = (rng.standard_normal(indices.shape) * 4).astype(dtype)
    if reduction == "mul":
        updates = (1 + rng.standard_normal(indices.shape) / 20).astype(dtype)
    if reduction == "none":
        want = oracle.scatter_elements(data, indices, updates, axis=1)
    else:
        index = list(np.indices(indices.shape, sparse=True))
        index[1] = np.where(indices < 0, indices + 90, indices)
        want = data.copy()
        with np.errstate(over="ignore"):
            UFUNCS[reduction].at(want, tuple(index), updates)
    with paths_taken() as taken:
        got = sx.scatter_elements(data, indices, updates, axis=1, reduction=reduction)
    assert taken == {"stage_rows": 1}
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    bad = indices.copy()
    bad[7, 100, 3] = 90
    with pytest.raises(IndexError, match=r"indices\[7, 100, 3\]"):
        sx.scatter_elements(data, bad, updates, axis=1, reduction=reduction)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_small_out_given_runs_through_a_new_array(index_dtype, reduction):
    """A call into an `out` much smaller than its indices (a histogram) scatters into a new array
    and copies it into `out` (``_kernels._through_fresh_output``) instead of checking every index
    first: the result is NumPy's one-by-one ``ufunc.at``, in place and into another array; a bad
    index (the last one) raises and leaves both as they were."""
    rng = np.random.default_rng(21)
    data = rng.standard_normal((40, 3))
    indices = rng.integers(-40, 40, (4000, 3)).astype(index_dtype)
    updates = rng.standard_normal((4000, 3)) * 0.5 + 1
    want = _sequential_axis0(data, indices, updates, reduction)
    # The shapes are chosen for the path; a same-sized `out` and indices do not take it.
    assert _kernels._through_fresh_output(scatter_call(data, indices, updates, 0, reduction), data)
    assert not _kernels._through_fresh_output(scatter_call(data, indices[:40], updates[:40], 0, reduction), data)
    inplace = data.copy()
    assert sx.scatter_elements(inplace, indices, updates, reduction=reduction, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, want)
    other = np.full(data.shape, np.nan)
    assert sx.scatter_elements(data, indices, updates, reduction=reduction, out=other) is other
    np.testing.assert_array_equal(other, want)
    bad = indices.copy()
    bad[-1, -1] = 40
    kept, other = data.copy(), np.full(data.shape, np.nan)
    for out in (kept, other):
        with pytest.raises(IndexError, match=r"index 40 at indices\[3999, 2\]"):
            sx.scatter_elements(kept, bad, updates, reduction=reduction, out=out)
    np.testing.assert_array_equal(kept, data)
    assert np.isnan(other).all()


def _last_level_cache_bytes() -> int:
    """The size of CPU 0's highest-level data or unified cache, read from sysfs here in Python."""
    import glob
    import os

    best_level, best = 0, 0
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(d, "size")) as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        digits = size.rstrip("KMG")
        if kind == "Instruction" or not digits.isdigit() or level < best_level:
            continue
        best_level, best = level, int(digits) * units.get(size[len(digits):], 1)
    return best


def test_streaming_threshold_is_the_last_level_cache_up_to_32_mib():
    # A call streams its output when its arrays exceed what the cache can hold: the last-level
    # cache as Linux reports it, at most 32 MiB (a virtual machine is told of its host's whole
    # cache); where Linux does not say, 32 MiB.
    from scatterx import _core

    threshold = _core.set_stream_bytes(0)
    _core.set_stream_bytes(threshold)
    llc = _last_level_cache_bytes()
    assert threshold == _core.get_stream_bytes() == (min(llc, 32 << 20) if llc else 32 << 20)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("reduction", ["add", "max", "min"])
def test_random_rows_of_a_large_target(threads, index_dtype, reduction):
    """Targets at random rows of data larger than the walks' cache size (2 MiB, where the walk
    asks for a later row's targets while it works on this one), negative indices among them,
    against NumPy's one-by-one ``ufunc.at``; then one index out of bounds in the last rows, where
    the requests for later rows run out, and one in a row that is asked for before it is worked
    on: an IndexError naming it, and ``out`` keeps its contents."""
    rng = np.random.default_rng(31)
    data = rng.integers(-50, 50, (20_000, 40)).astype(np.float32)  # 3.2 MB
    indices = rng.integers(-20_000, 20_000, (6_000, 40)).astype(index_dtype)
    updates = rng.integers(-50, 50, indices.shape).astype(np.float32)
    expected = data.copy()
    UFUNCS[reduction].at(expected, (indices, np.arange(40)[None, :]), updates)
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    try:
        got = sx.scatter_elements(data, indices, updates, 0, reduction)
        np.testing.assert_array_equal(got, expected)
        for row, col in [(5_998, 3), (2_000, 39)]:
            bad = indices.copy()
            bad[row, col] = 20_000
            out = data.copy()
            with pytest.raises(IndexError, match=rf"index 20000 at indices\[{row}, {col}\]"):
                sx.scatter_elements(data, bad, updates, 0, reduction, out=out)
            np.testing.assert_array_equal(out, data)
            with pytest.raises(IndexError, match=rf"index 20000 at indices\[{row}, {col}\]"):
                sx.scatter_elements(data, bad, updates, 0, reduction)
            if reduction != "add":  # the backward's walks over the same random rows
                with pytest.raises(IndexError, match=rf"index 20000 at indices\[{row}, {col}\]"):
                    sx.scatter_elements_vjp(np.ones_like(data), data, bad, updates, 0, reduction)
    finally:
        sx.set_num_threads(previous)


@pytest.fixture(params=[False, True], ids=["plain", "non_temporal"])
def read_once_hint(request):
    """The index and update rows of a materialised index asked for with the non-temporal hint
    and without (`set_read_once_non_temporal`, chosen by CPU); the setting restored after."""
    before = _core.set_read_once_non_temporal(request.param)
    yield request.param
    _core.set_read_once_non_temporal(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
@pytest.mark.parametrize("mixed_row", [None, 100, 9000, 19999])
def test_materialised_index_rows_checked_by_chunks(restore_threads, read_once_hint, dtype, reduction, mixed_row):
    """A contiguous index whose rows each hold one value (the expanded index materialised, as an
    ONNX Expand produces it) takes the split by target rows too, its rows checked a chunk at a
    time by the threads. A row of several values (in the first chunk: the columns' way from
    the start; later, or in the last, partial chunk: that chunk element by element) must give
    the sequential result all the same: against ufunc.at bit for bit, for 1, 2 and 3 threads,
    int64 and int32 indices, a new output and out=data, and a bad index in such a row; with
    the rows asked for with the non-temporal hint and without (`read_once_hint`)."""
    rng = np.random.default_rng(29)
    data = (rng.standard_normal((3000, 40)) * 3).astype(dtype)
    rows = rng.integers(0, 3000, 20000)
    updates = (rng.standard_normal((20000, 40)) * 3).astype(dtype)
    if reduction == "mul":
        updates = (1 + rng.standard_normal((20000, 40)) / 50).astype(dtype)
    indices = np.ascontiguousarray(np.broadcast_to(rows[:, None], updates.shape))
    if mixed_row is not None:
        # Targets owned by the other thread (rows 0.. and 2999..), and a repeat of a target
        # that later rows also update, so the order across rows shows.
        indices[mixed_row, ::3] = (indices[mixed_row, ::3] + 1500) % 3000
        indices[mixed_row, 1] = rows[mixed_row - 1]
    want = _sequential_axis0(data, indices, updates, reduction)
    for index_dtype in (np.int64, np.int32):
        ix = indices.astype(index_dtype)
        for threads in (1, 2, 3):
            sx.set_num_threads(threads)
            _scatter_both_ways(data, ix, updates, reduction, want)
            np.testing.assert_array_equal(sx.gather_elements(data, ix, axis=0), np.take_along_axis(data, ix, 0))
    if mixed_row is not None:
        bad = indices.copy()
        bad[mixed_row, 5] = 3000
        with pytest.raises(IndexError, match=rf"index 3000 at indices\[{mixed_row}, 5\]"):
            sx.scatter_elements(data, bad, updates, axis=0, reduction=reduction)
        kept = data.copy()
        with pytest.raises(IndexError):
            sx.scatter_elements(kept, bad, updates, axis=0, reduction=reduction, out=kept)
        np.testing.assert_array_equal(kept.view(np.uint8), data.view(np.uint8))


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
@pytest.mark.parametrize("layout", ["view", "materialised", "mixed"])
def test_index_rows_handed_over(restore_threads, threads, reduction, layout):
    """A thread that has applied its rows takes the upper half of the target rows of the thread
    with the most work left, from that thread's next block of rows on. Most rows here go to the
    first thread's targets, so the others finish first and ask for its work again and again:
    the sequential result (NumPy) bit for bit all the same, for a new output and out=data, with
    negative indices, and an index out of bounds among the last rows raises and leaves out=data
    as it was. The index as a broadcast view, materialised (its chunks checked by whichever
    thread gets there first), and materialised with rows of several values in some chunks
    (those chunks element by element, by the threads that own their targets at the time)."""
    rng = np.random.default_rng(43)
    M, R, W = 60000, 3000, 16
    data = (rng.standard_normal((R, W)) * 3).astype(np.float32)
    rows = np.where(rng.random(M) < 0.9, rng.integers(0, R // 10, M), rng.integers(0, R, M))
    rows = np.where(rng.random(M) < 0.3, rows - R, rows)  # the same rows, counted from the end
    updates = (rng.standard_normal((M, W)) * 3).astype(np.float32)
    if reduction == "mul":
        updates = (1 + rng.standard_normal((M, W)) / 50).astype(np.float32)
    indices = np.broadcast_to(rows[:, None], updates.shape)
    if layout != "view":
        indices = indices.copy()
    if layout == "mixed":
        # Rows of several values in a tenth of the chunks of 256 rows, early, middle and late:
        # some of their elements aimed at the hot targets, some at the others.
        for j in rng.choice(M, 24, replace=False):
            indices[j, rng.integers(0, W, 5)] = rng.integers(-R, R // 10, 5)
    want = _sequential_axis0(data, indices, updates, reduction)
    sx.set_num_threads(threads)
    for _ in range(3):
        _scatter_both_ways(data, indices, updates, reduction, want)
    bad = rows.copy() if layout == "view" else indices.copy()
    bad[M - 5] = R
    if layout == "view":
        bad = np.broadcast_to(bad[:, None], updates.shape)
    kept = data.copy()
    with pytest.raises(IndexError, match=rf"index {R} at indices\[{M - 5}, 0\]"):
        sx.scatter_elements(kept, bad, updates, axis=0, reduction=reduction, out=kept)
    np.testing.assert_array_equal(kept.view(np.uint8), data.view(np.uint8))
    with pytest.raises(IndexError, match=rf"index {R} at indices\[{M - 5}, 0\]"):
        sx.scatter_elements(data, bad, updates, axis=0, reduction=reduction)


ROW_DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int8, np.bool_, np.complex64]


def _row_case(rng, np_rng):
    """A call whose index rows (mostly) hold one value each, along axis 0 of a 2-D or 3-D data:
    as a stride-0 view, materialised, materialised with a few rows of several values, or with
    one index out of bounds; index widths that cover data's rows or only a part of them."""
    dtype = np.dtype(rng.choice(ROW_DTYPES))
    index_dtype = np.dtype(rng.choice([np.int64, np.int32, np.int16, np.uint8]))
    R = rng.choice([1, 2, 7, 100, 250, 1000])
    if index_dtype == np.uint8:
        R = min(R, 250)
    # Mostly wide and long enough for the threads (the split by target rows, its chunks of 256).
    W = rng.choice([1, 3, 17, 64, 64, 64])
    M = rng.choice([1, 255, 257, 700, 1500, 1500])
    Wi = W if rng.random() < 0.7 else rng.randint(1, W)
    tail = (rng.choice([1, 2, 3]),) if rng.random() < 0.2 else ()
    shape, ishape = (R, W) + tail, (M, Wi) + tail
    rows = np_rng.integers(0, R, M)
    if index_dtype.kind == "i" and rng.random() < 0.3:
        rows = np.where(np_rng.random(M) < 0.5, rows - R, rows)  # the same rows, counted from the end
    column = rows.reshape((M,) + (1,) * (len(ishape) - 1)).astype(index_dtype)
    kind = rng.choice(["view", "dense", "mixed", "mixed", "bad"])
    indices = np.broadcast_to(column, ishape)
    if kind != "view":
        indices = indices.copy()
    if kind == "bad":
        row = indices[rng.randrange(M)].reshape(-1)
        row[rng.randrange(row.size)] = R + rng.randint(0, 2)
    elif kind == "mixed":
        for _ in range(rng.choice([1, 2, 5])):
            row = indices[rng.randrange(M)].reshape(-1)
            row[rng.randrange(row.size)] = rng.randrange(R)
    reduction = rng.choice(["none", "add", "mul", "max", "min"])
    if dtype.kind == "c" and reduction in ("max", "min"):
        reduction = "add"

    def values(shape):
        if dtype == np.bool_:
            return np_rng.random(shape) < 0.5
        if dtype.kind == "i":
            return np_rng.integers(-5, 6, shape).astype(dtype)
        v = np_rng.standard_normal(shape) + (1j * np_rng.standard_normal(shape) if dtype.kind == "c" else 0)
        return (1 + v / 50 if reduction == "mul" else v * 3).astype(dtype)

    return values(shape), indices, values(ishape), reduction, kind


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.sampled_from([1, 2, 3]), st.booleans(), st.booleans(), st.booleans())
def test_rows_of_one_target_drawn(rng, threads, streaming, in_place, wide):
    """Drawn calls of the paths for rows of one target (the split by target rows with its chunked
    check, the row-at-a-time combine, the gather's row copies), against NumPy bit for bit:
    dtypes from bool to complex, int64 to uint8 indices, negative indices, partial index rows,
    3-D arrays, 1-3 threads, streaming stores or not (64-byte ones where the CPU has them, or
    16-byte), out=data; an index out of bounds raises IndexError and leaves data as it was."""
    from scatterx import _core

    data, indices, updates, reduction, kind = _row_case(rng, np.random.default_rng(rng.getrandbits(32)))
    before_threads = sx.get_num_threads()
    before_stream = _core.set_stream_bytes(0 if streaming else _core.get_stream_bytes())
    before_wide = _core.set_wide_stores(wide)
    try:
        sx.set_num_threads(threads)
        kept = data.copy()
        out = data if in_place else None
        if kind == "bad":
            with pytest.raises(IndexError):
                sx.scatter_elements(data, indices, updates, axis=0, reduction=reduction, out=out)
            with pytest.raises(IndexError):
                sx.gather_elements(data, indices, axis=0)
            np.testing.assert_array_equal(data.view(np.uint8), kept.view(np.uint8))
            return
        want = _sequential_axis0(kept, indices, updates, reduction)
        got = sx.scatter_elements(data, indices, updates, axis=0, reduction=reduction, out=out)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        np.testing.assert_array_equal(sx.gather_elements(kept, indices, axis=0), kept[_positions(kept, indices)])
    finally:
        sx.set_num_threads(before_threads)
        _core.set_stream_bytes(before_stream)
        _core.set_wide_stores(before_wide)


def _narrowing_sources() -> np.ndarray:
    """float32 values for the casts to 16 bits: every float32 whose low bits (13 for float16,
    16 for bfloat16) are on or next to a rounding boundary, under every pattern of the bits
    above; the exact midpoints between neighbouring float16 and bfloat16 values (subnormal
    float16 included) and the floats next to them; NaNs of every payload class and sign."""
    top19 = np.arange(2**19, dtype=np.uint32) << 13
    top16 = np.arange(2**16, dtype=np.uint32) << 16
    bits = [top19 | low for low in (0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF)]
    bits += [top16 | low for low in (0x7FFF, 0x8000, 0x8001, 0xFFFF)]
    values = [np.concatenate(bits).view(np.float32)]
    for narrow in (np.float16, ml_dtypes.bfloat16):
        every = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(narrow)
        every = np.sort(every[np.isfinite(every)].astype(np.float64))
        mids = ((every[:-1] + every[1:]) / 2).astype(np.float32)  # exact: 12 or 9 bits
        values += [mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))]
    out = np.concatenate(values)
    return np.random.default_rng(11).permutation(out)  # NaNs inside and between the vectors


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("threads", [1, 2])
def test_narrowing_to_16_bits_is_numpys_cast(restore_threads, threads, dtype):
    """The native cast of float32 into float16 / bfloat16 (the gradients of 16-bit data end
    there) gives the bits of NumPy's and ml_dtypes' casts: rounding to nearest even, overflow,
    subnormals, and NumPy's NaN rule (payload kept, not quieted), for tails of every length."""
    sx.set_num_threads(threads)
    src = _narrowing_sources()
    with np.errstate(invalid="ignore", over="ignore"):
        expected = src.astype(dtype).view(np.uint16)
    got = _kernels.cast(src, dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == src.shape
    np.testing.assert_array_equal(got.view(np.uint16), expected)
    for n in range(40):  # short arrays: tails, and a NaN in every position of a vector
        part = src[n * 7: n * 7 + n].reshape(n, 1)
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(_kernels.cast(part, dtype).view(np.uint16), part.astype(dtype).view(np.uint16))
    for nan_at in range(17):
        part = np.linspace(-3, 3, 33, dtype=np.float32)
        part[nan_at] = np.uint32(0x7F800001).view(np.float32)  # signalling: NumPy keeps it so
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(_kernels.cast(part, dtype).view(np.uint16), part.astype(dtype).view(np.uint16))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("threads", [1, 2])
def test_widening_from_16_bits_is_numpys_cast(restore_threads, threads, dtype):
    """The native cast of float16 / bfloat16 into float32 (the compute type of their gradients)
    gives the bits of NumPy's and ml_dtypes' casts for every bit pattern (NaN payloads kept,
    signalling ones too), in arrays of every tail length and with a NaN in every lane."""
    sx.set_num_threads(threads)
    every = np.random.default_rng(4).permutation(np.arange(2**16, dtype=np.uint32).astype(np.uint16))
    for src in [np.tile(every, 40).view(dtype)] + [every[n * 5: n * 5 + n].view(dtype) for n in range(40)]:
        got = _kernels.contiguous(src, np.float32)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(np.uint32), src.astype(np.float32).view(np.uint32))
    snan = np.uint16(0x7C01 if dtype == np.float16 else 0x7F81)
    for nan_at in range(17):
        bits = np.linspace(-3, 3, 33, dtype=np.float32).astype(dtype).view(np.uint16)
        bits[nan_at] = snan
        np.testing.assert_array_equal(_kernels.cast(bits.view(dtype), np.float32).view(np.uint32),
                                      bits.view(dtype).astype(np.float32).view(np.uint32))


def test_cast_of_other_layouts_and_types_is_astype():
    """What the native cast does not take (a strided view, float64, another target) is NumPy's."""
    src = np.random.default_rng(2).standard_normal((64, 50)).astype(np.float32)
    for arr, dtype in ((src[:, ::2], np.float16), (src.T, ml_dtypes.bfloat16), (src.astype(np.float64), np.float16),
                       (src, np.float64)):
        got = _kernels.cast(arr, dtype)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, arr.astype(dtype))
    f = np.asfortranarray(src.astype(np.float16))
    got = _kernels.contiguous(f, np.float32)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, f.astype(np.float32))
    # copy=False, as astype's: the array itself when it has the dtype, else a converted copy.
    assert _kernels.cast(src, np.float32, copy=False) is src
    assert _kernels.cast(src, np.float32) is not src
    got = _kernels.cast(src, np.float16, copy=False)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), src.astype(np.float16).view(np.uint16))

    with pytest.raises(ValueError, match="float32 into float16 or bfloat16, or back"):
        _core.convert(src.astype(np.float64), np.empty(src.shape, np.float16))
    with pytest.raises(ValueError, match="float32 into float16 or bfloat16, or back"):
        _core.convert(src.astype(np.float16), np.empty(src.shape, ml_dtypes.bfloat16))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.convert(src[:, ::2], np.empty((64, 25), np.float16))
    with pytest.raises(ValueError, match="overlap"):
        _core.convert(src, src.reshape(-1)[: src.size // 2].view(np.float16).reshape(src.shape))
