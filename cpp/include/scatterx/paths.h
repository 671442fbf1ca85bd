// Counts of the calls that took each of the kernels' paths that a call reaches only at some sizes,
// on some CPUs or under some settings: the split of one long fiber and its listing's width, the
// rows of one target each, the staged rows, the gathers' streaming stores and requests ahead
// beyond the cache, the backwards' staged rows and scratch. A test sized to reach a path reads
// the count before and after its call (`_core.path_counts`), so that a call which misses the path
// (a size below a threshold, a busy pool) fails the test instead of passing through another path
// unseen.
//
// Each count is bumped once per call (never per element), by a relaxed atomic add on a line of
// its own, so concurrent callers neither race nor share a line.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace scatterx {

enum class Path : int {
    fiber_reader,        // one long fiber on one thread, a second reading its streams ahead
    fiber_by_positions,  // a sorted fiber split by positions (scatter_fiber_by_positions)
    ascending_chains,    // its halves' 16-bit float adds and products in chains
    fiber_by_targets,    // a fiber split by targets (scatter_fiber_by_targets), and its listing:
    list_one,            //   one element at a time
    list_avx2,           //   four at a time by AVX2
    list_avx512,         //   eight at a time by AVX-512, with element numbers
    list_avx512_values,  //   eight at a time by AVX-512, with 8-byte updates
    list_avx512_int32,   //   sixteen at a time by AVX-512, the targets as int32
    rows_by_target,      // rows of one target each (scatter_by_target_rows)
    stage_rows,          // blocks of target rows worked in a scratch (stage_rows)
    gather_stream,       // a gather's output written by streaming stores (kStreamBytes)
    gather_far_fiber,    // a contiguous fiber gathered from beyond kFiberGatherFarBytes
    gather_whole_rows,   // rows of one value each gathered whole (gather_whole_rows)
    gather_far_rows,     // rows of several values from beyond the cache, later rows asked for
    none_backward_staged,          // the backward of "none": rows staged (kRowStageBytes),
    none_backward_staged_updates,  //   and their update gradients beside them
    mul_backward_scratch,          // the backward of "mul": P and S in a per-thread scratch,
    mul_backward_in_place,         //   or, for fibers longer than that, in dD itself
    count
};

inline constexpr const char* path_names[] = {
    "fiber_reader",         "fiber_by_positions",           "ascending_chains",     "fiber_by_targets",
    "list_one",             "list_avx2",                    "list_avx512",          "list_avx512_values",
    "list_avx512_int32",    "rows_by_target",               "stage_rows",           "gather_stream",
    "gather_far_fiber",     "gather_whole_rows",            "gather_far_rows",      "none_backward_staged",
    "none_backward_staged_updates", "mul_backward_scratch", "mul_backward_in_place",
};
static_assert(std::size(path_names) == std::size_t(Path::count), "a name for every path");

struct alignas(64) PathCount {
    std::atomic<uint64_t> n{0};
};
inline PathCount path_counts[int(Path::count)];

inline void took(Path p) { path_counts[int(p)].n.fetch_add(1, std::memory_order_relaxed); }
inline uint64_t path_count(int k) { return path_counts[k].n.load(std::memory_order_relaxed); }

// The paths that one parallel call's blocks took, each counted once for the call when it ends:
// a block adds the bits of the paths it took (one relaxed atomic or per block, never per element
// or row).
class PathsSeen {
  public:
    static constexpr uint32_t bit(Path p) { return uint32_t(1) << int(p); }
    void add(uint32_t bits) {
        if (bits) seen_.fetch_or(bits, std::memory_order_relaxed);
    }
    ~PathsSeen() {
        for (uint32_t bits = seen_.load(std::memory_order_relaxed); bits; bits &= bits - 1)
            took(Path(std::countr_zero(bits)));
    }

  private:
    std::atomic<uint32_t> seen_{0};
};
static_assert(int(Path::count) <= 32, "a bit for every path");

}  // namespace scatterx
