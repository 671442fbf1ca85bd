// A measurement of the machine, not an operator: how fast it can touch the cache lines of a
// pattern of random accesses, with nothing else to do. `scatterx bench` runs it on the targets
// of each case (the same positions, in the same order, on the same number of threads) to tell
// whether the streaming bound is reachable at all: it counts every byte once, but a random
// access moves a whole cache line, and a line of a table larger than the cache is fetched
// again (and, written, stored again) each time it is touched.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "parallel.h"

namespace scatterx {

// The fewest positions for which a second thread is used.
inline constexpr int64_t kTouchGrain = int64_t(1) << 15;

// Touches `span` bytes at each byte offset positions[k] of `table` (`nbytes` long), in order:
// one byte per 64-byte line is read, and with `write` stored back unchanged (the line then has
// to be written back, as a scatter's would). Threads take contiguous ranges of positions, as
// the kernels' best split does; a position is clamped into the table (never out of bounds).
// Returns a value computed from the bytes read, so that the reads cannot be dropped.
// Accesses are prefetched `ahead` positions before they are made (the best distance depends on
// the pattern and the machine: the caller tries several).
inline uint64_t touch_lines(char* table, int64_t nbytes, const int64_t* positions, int64_t n, int64_t span,
                            bool write, int64_t ahead) {
    if (n == 0 || nbytes < span || span <= 0) return 0;
    const uint64_t last = uint64_t(nbytes - span);
    const int64_t lines = (span + 63) / 64;
    ahead = std::max<int64_t>(1, ahead);
    // One contiguous range per thread (measured: 64 smaller ranges dealt out in turn took 50 ms
    // where two halves took 43).
    const int parts = int(std::min<int64_t>(ThreadPool::instance().num_threads(), std::max<int64_t>(1, n / kTouchGrain)));
    std::atomic<uint64_t> total{0};
    // One element per access (one line) and whole rows are separate loops.
    auto one_line = [&](int64_t lo, int64_t hi, auto is_write) {
        uint64_t sum = 0;
        for (int64_t k = lo; k < hi; ++k) {
            if (k + ahead < hi) __builtin_prefetch(table + std::min(uint64_t(positions[k + ahead]), last), is_write.value);
            volatile char* b = table + std::min(uint64_t(positions[k]), last);
            const char v = *b;
            sum += uint8_t(v);
            if constexpr (is_write.value) *b = v;
        }
        return sum;
    };
    auto rows = [&](int64_t lo, int64_t hi, auto is_write) {
        uint64_t sum = 0;
        for (int64_t k = lo; k < hi; ++k) {
            if (k + ahead < hi) {
                const char* q = table + std::min(uint64_t(positions[k + ahead]), last);
                for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(q + 64 * l, is_write.value);
            }
            char* p = table + std::min(uint64_t(positions[k]), last);
            for (int64_t l = 0; l < lines; ++l) {
                volatile char* b = p + std::min<int64_t>(64 * l, span - 1);
                const char v = *b;
                sum += uint8_t(v);
                if constexpr (is_write.value) *b = v;
            }
        }
        return sum;
    };
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        uint64_t sum = 0;
        for (int part = w; part < parts; part += nw) {
            auto [lo, hi] = split_range(n, part, parts);
            if (lines == 1) sum += write ? one_line(lo, hi, std::true_type{}) : one_line(lo, hi, std::false_type{});
            else sum += write ? rows(lo, hi, std::true_type{}) : rows(lo, hi, std::false_type{});
        }
        total.fetch_add(sum, std::memory_order_relaxed);
    });
    return total.load();
}

}  // namespace scatterx
