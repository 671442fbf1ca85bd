// A measurement of the machine, not an operator: how fast it can touch the cache lines of a
// pattern of random accesses, while reading the values that move with them in sequence, with
// nothing else to do. `scatterx bench` runs it on the targets of each case (the same
// positions, in the same order, on the same number of threads) to tell whether the streaming
// bound is reachable at all: it counts every byte once, but a random access moves a whole
// cache line, and a line of a table larger than the cache is fetched again (and, written,
// stored again) each time it is touched.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels.h"
#include "parallel.h"

namespace scatterx {

// The fewest positions for which a second thread is used.
inline constexpr int64_t kTouchGrain = int64_t(1) << 15;
// The stream is read in the shares of blocks of this many positions (a power of two).
inline constexpr int64_t kStreamBlock = 16;

// The end of the stream's share of positions [0, k) (of n positions, stream_bytes long).
inline int64_t stream_share_end(int64_t k, int64_t n, int64_t stream_bytes) {
    return int64_t((__int128)k * stream_bytes / n);
}

// One thread's walk over positions [lo, hi) (see touch_lines). It works on copies of what it
// uses: through a pointer to char, the stores into the table could otherwise alias captured
// variables, which the compiler would then reload after each of them (measured: the walk of
// 1e7 single bytes in 800 KB took half as long again). Positions are P (int32 or int64), as
// wide as the indices they stand for.
template <class P> struct TouchRange {
    char* table;
    uint64_t last;  // the last valid position
    const P* positions;
    int64_t n, lines, ahead;
    const char* stream;
    int64_t stream_bytes;
    int64_t last_byte;  // the offset of the last byte of an access (span - 1)
    bool stream_written;  // the stream is written in full, by streaming stores (see touch_lines)

    // With `progress`, the walk publishes how far it got every kProgressStep positions, for a
    // thread that reads ahead of it (read_ahead, as the one-fiber scatter does).
    template <bool Write, bool OneLine>
    uint64_t run(int64_t lo, int64_t hi, std::atomic<int64_t>* progress = nullptr) const {
        char* const tab = table;
        const P* const pos = positions;
        const uint64_t lst = last;
        const int64_t ahd = ahead, nl = OneLine ? 1 : lines, end = last_byte;
        const int64_t count = n, sbytes = stream_bytes;
        // Bytes of stream per position when whole (the usual case): no 128-bit division, a
        // library call, per block (it cost about 2 ns per position of a 1-D histogram).
        const int64_t per = sbytes % count == 0 ? sbytes / count : -1;
        auto share_end = [&](int64_t k) { return per >= 0 ? k * per : stream_share_end(k, count, sbytes); };
        uint64_t sum = 0;
        // Read: one byte of each line that the share touches (the first may be the previous
        // share's last). Written: each line that starts in the share, whole (so that no line is
        // written by two threads), by streaming stores where it lies within the stream.
        const bool written = stream_written;
        char* const out = const_cast<char*>(stream);
        int64_t s = written ? (share_end(lo) + 63) & ~int64_t(63) : share_end(lo) & ~int64_t(63);
        for (int64_t k = lo; k < hi; ++k) {
            if ((k & (kStreamBlock - 1)) == 0 || k == lo) {
                // The stream's share of the block of positions that starts here, a line at a time.
                const int64_t to = share_end(std::min(hi, (k | (kStreamBlock - 1)) + 1));
                if (written) {
                    for (; s < to; s += 64) write_line(out + s, std::min<int64_t>(64, sbytes - s));
                } else {
                    for (; s < to; s += 64) sum += uint8_t(*static_cast<const volatile char*>(stream + s));
                }
                if (progress && (k & (kProgressStep - 1)) == 0) progress->store(k, std::memory_order_release);
            }
            if (k + ahd < hi) {
                const char* q = tab + std::min(uint64_t(int64_t(pos[k + ahd])), lst);
                for (int64_t l = 0; l < nl; ++l) __builtin_prefetch(q + 64 * l, Write);
            }
            char* p = tab + std::min(uint64_t(int64_t(pos[k])), lst);
            for (int64_t l = 0; l < nl; ++l) {
                volatile char* b = p + std::min<int64_t>(64 * l, end);
                const char v = *b;
                sum += uint8_t(v);
                if constexpr (Write) *b = v;
            }
        }
        if (written) stream_fence();
        return sum;
    }

    // `bytes` (at most 64) of zeros from p, p 64-byte aligned relative to the stream: by four
    // 16-byte streaming stores when the line is whole and aligned, else by plain stores.
    static void write_line(char* p, int64_t bytes) {
#if defined(__x86_64__)
        if (bytes == 64 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
            const __m128i z = _mm_setzero_si128();
            for (int q = 0; q < 4; ++q) _mm_stream_si128(reinterpret_cast<__m128i*>(p + 16 * q), z);
            return;
        }
#endif
        std::memset(p, 0, size_t(bytes));
    }
};

// Touches `span` bytes at each byte offset positions[k] of `table` (`nbytes` long), in order:
// one byte per 64-byte line is read, and with `write` stored back unchanged (the line then has
// to be written back, as a scatter's would). Alongside, the `stream` (`stream_bytes` long, or
// null: the values that move in sequence with the targets, one per index) is read one byte per
// line, in step with the positions: the share of each block of kStreamBlock positions before
// they are touched. Threads take contiguous ranges of positions and their shares of the
// stream, as the kernels' best split does; a position is clamped into the table (never out of
// bounds). Returns a value computed from the bytes read, so that the reads cannot be dropped.
// Accesses are prefetched `ahead` positions before they are made (the best distance depends on
// the pattern and the machine: the caller tries several).
//
// With `stream_written`, the stream is what the kernel writes (a gather's result, the update
// gradients of a scatter's backward), and it is written in full by streaming stores, as a large
// call's kernel writes it, rather than read a byte per line: on the Zen 3 machine a read of each
// line cost more than the streaming stores of the whole stream (stop 23: the probe of
// `gather_hist`, two threads, 31 ms with its stream read, 16.5 ms without a stream, where
// scatterx, writing the stream, took 16.4).
//
// With `ordered`, the positions are those of one fiber whose updates must be applied in order
// (a float add or mul: SPEC section 2), which no kernel can share out by ranges: one thread
// walks them all, and a second, when the pool has one, reads the positions and the stream
// ahead of it (read_ahead), the one-fiber scatter's own strategy. The positions are read as
// the indices they stand for would be: for an int32 index, int32 positions.
template <class P>
uint64_t touch_lines(char* table, int64_t nbytes, const P* positions, int64_t n, int64_t span, bool write,
                     int64_t ahead, const char* stream = nullptr, int64_t stream_bytes = 0, bool ordered = false,
                     bool stream_written = false) {
    if (n == 0 || nbytes < span || span <= 0) return 0;
    if (!stream) stream_bytes = 0;
    // One contiguous range per thread (measured: 64 smaller ranges dealt out in turn took 50 ms
    // where two halves took 43; two threads each touching the positions of its own half of the
    // table, or one touching all while the other read ahead, were never faster than ranges).
    const int parts = int(std::min<int64_t>(ThreadPool::instance().num_threads(), std::max<int64_t>(1, n / kTouchGrain)));
    const TouchRange<P> walk{table, uint64_t(nbytes - span), positions, n, (span + 63) / 64,
                             std::max<int64_t>(1, ahead), stream, stream_bytes, span - 1,
                             stream_written && stream_bytes > 0 && !ordered};
    auto walk_range = [&](int64_t lo, int64_t hi, std::atomic<int64_t>* progress) {
        if (walk.lines == 1)
            return write ? walk.template run<true, true>(lo, hi, progress) : walk.template run<false, true>(lo, hi, progress);
        return write ? walk.template run<true, false>(lo, hi, progress)
                     : walk.template run<false, false>(lo, hi, progress);
    };
    std::atomic<uint64_t> total{0};
    if (ordered) {
        if (ThreadPool::instance().num_threads() < 2 || n < kTouchGrain) return walk_range(0, n, nullptr);
        // The stream as n values of `item` bytes (the last stream_bytes % n bytes left out).
        const int64_t item = stream_bytes / n;
        std::atomic<int64_t> progress{0};
        ThreadPool::instance().run(2, [&](int w, int) {
            if (w == 1) {
                const char* pc = reinterpret_cast<const char*>(positions);
                const int64_t width = int64_t(sizeof(P));
                read_ahead(pc, width, item > 0 ? stream : pc, item > 0 ? item : width, n, progress);
                return;
            }
            total.store(walk_range(0, n, &progress), std::memory_order_relaxed);
            progress.store(n, std::memory_order_release);
        });
        return total.load();
    }
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        uint64_t sum = 0;
        for (int part = w; part < parts; part += nw) {
            auto [lo, hi] = split_range(n, part, parts);
            sum += walk_range(lo, hi, nullptr);
        }
        total.fetch_add(sum, std::memory_order_relaxed);
    });
    return total.load();
}

// The ordered loop of one fiber of float adds, alone: table[positions[k]] += values[k] for k in
// [0, stretch), that stretch applied over and over until n updates are done, in order, on the
// calling thread. SPEC section 2 leaves such a fiber (a 1-D histogram) to one thread, applying
// each target's adds in the order of the indices, so whatever else a kernel overlaps with it
// (reading the streams, on a second thread), it cannot take less time than this loop. With a
// short stretch of the case's own positions and values, read once and then served by L1, and
// no index check, the figure is the loop's own work with the least memory traffic it can have:
// a measurement of the machine, as the touch probe is, not of a kernel. Products are not
// measured: repeated, they would drift towards subnormal values, whose arithmetic is slower.
// The caller checks that every position is in [0, size).
template <class T, class P>
void ordered_adds(T* table, const P* positions, const T* values, int64_t stretch, int64_t n) {
    for (int64_t c = 0; c < n; c += stretch) {
        const int64_t m = std::min(stretch, n - c);
        for (int64_t k = 0; k < m; ++k) table[positions[k]] += values[k];
    }
}

}  // namespace scatterx
