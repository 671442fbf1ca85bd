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
static_assert(kStreamBlock % 4 == 0, "the walk by ranges touches single lines four at a time");
// Positions listed at a time by a thread that touches its own share of the targets (run_listed).
inline constexpr int64_t kListBlock = 256;
// Bytes ahead at which the `checked` split asks for its range of the stream's checked part (four
// rows of 64 int64, as scatter_by_target_rows asks for a materialised index's rows: kVerifyAhead).
inline constexpr int64_t kRangedAhead = 2048;
// Bytes of positions ahead at which a walk by ranges (run) asks for its positions, and for the
// stream that goes with them when it reads it: the kernels ask for their index and update streams
// ahead of the random targets as well (kGatherIndexAheadBytes, kRowStreamAhead, kStreamRows),
// since the misses at random targets leave the hardware prefetcher behind (our reading). Until
// stop 59 the walk left its streams to the hardware, and was slower than scatterx itself in the
// cases of single random elements (`gather_max0`'s scalar walk still is; since stop 60, where it
// asks for nothing ahead, the walk reads such elements by vector gathers: TouchRange::gathered).
// Stop 59, the Intel virtual machine (family 6 model 167), one build with a switch, one process,
// two threads, each case's fastest way, medians of five calls, two rounds, against asking for
// nothing: `max0` 28.6 -> 18.5 ms (scatterx 22.0), `max0_i32` 25.0 -> 19.3 (19.7), `max0_f16`
// 23.9 -> 14.2 (19.3), `gather_max0` 27.4 -> 17.5 (10.3), `vjp_max` 53.4 -> 31.8 (63.1),
// `hist_add`'s reader way 30.1 -> 23.2 (12.6); 2048 bytes ahead as 1024, 4096 slower (`max0` 19.2
// / 19.1 / 21.5, medians of seven calls, three rounds).
inline constexpr int64_t kProbeStreamAheadBytes = 1024;

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
    // The `checked` split (TouchSplit): the checked part of the stream (its last `ranged_bytes`,
    // not counted in stream_bytes), read by contiguous ranges; its lines and the stream's asked for
    // with the non-temporal hint where `non_temporal` (as the kernel asks for them:
    // read_once_non_temporal).
    const char* ranged = nullptr;
    int64_t ranged_bytes = 0;
    bool non_temporal = false;
    // Reads of one line per access by vector gathers (see gathered), where `ahead` is 0.
    bool gathers = false;
    // Whether a walk by ranges asks for its positions and stream ahead (kProbeStreamAheadBytes);
    // the one walk of `reader` asks only where the one-fiber scatter does (touch_lines).
    bool streams_ahead = true;

    // With `progress`, the walk publishes how far it got every kProgressStep positions, for a
    // thread that reads ahead of it (read_ahead, as the one-fiber scatter does).
    // Accesses of one line each go a block of kStreamBlock positions at a time (since stop 68):
    // the block's stream and the requests ahead of its positions once per block, then its
    // positions four at a time with one bounds check. Until then every position went through the
    // stream step's tests, its request ahead's test and its own clamp, a dozen and more
    // instructions per access, and on the Zen 3 machine the probe of single random elements was
    // slower than the kernels it is the floor of (our reading, as for the vector gathers: the
    // misses in flight are bounded by the instructions the core holds). Old and new builds in
    // alternating processes, five rounds of medians of five calls, two threads, 32 ahead:
    // gather_hist 15.99 -> 8.67 ms, gather_max0 14.50 -> 8.45, max0 11.41 -> 9.83, rows_none
    // 1.45 -> 1.27, hist_add's reader 28.94 -> 21.92, faster in 5, 5, 4, 4 and 5 of 5 rounds
    // (scatterx 6.9-7.0, 9.0-9.4, 15.2-16.1, 1.4-1.5 and 13.4-13.5 ms in the same processes).
    // Accesses of several lines keep the walk one position at a time (rows of 256 bytes:
    // gather_mp, mp_add's reader, vjp_gather within the rounds' spread either way); the lambdas
    // are inlined by force, as without it the walk of such rows, which calls them from three
    // places, ran a third slower (mp_add's reader 8 ahead 10.14 -> 13.37 ms, 0 of 6 rounds).
    // A block's written accesses are each read, stored back and counted, one after the other,
    // into one sum (since stop 70): with a sum for each of the four, as the reads keep, the loop
    // kept the sums on the stack, an extra load and store per access (our reading of the
    // disassembly: four positions, four values and the loop's own registers leave no room for
    // them). And the walk of `reader` asks for its streams ahead only where the one-fiber scatter
    // does (fiber_streams_ahead): on the Zen 3 machine, where that scatter leaves them to the
    // hardware prefetcher, `hist_add`'s reader way was slower than scatterx with them. Stop 70,
    // one build with a switch, one process, two threads, ten rounds of medians of seven calls,
    // `hist_add`'s reader 32 ahead: 28.63 ms as it was, 28.21 with its streams left alone, 22.76
    // with one sum as well (none ahead 28.68 / 28.05 / 25.10; scatterx 18.81 beside). Old and new
    // builds in alternating processes, six rounds of medians of five calls: `hist_add`'s reader
    // 32 ahead 34.83 -> 27.79 ms, `hist_add_i32`'s 32.40 -> 28.08 (faster in 5 of 6 each),
    // `vjp_mul`'s one thread none ahead 20.28 -> 13.46 (6 of 6); `rows_none`, `mid_mul` and
    // `vjp_none` within the rounds' spread (scatterx 22.4, 23.7, 8.6, 2.7, 4.2 and 2.9 ms
    // beside them, in the order named).
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
        constexpr int64_t far = kProbeStreamAheadBytes / int64_t(sizeof(P)), per_line = 64 / int64_t(sizeof(P));
        // The walk's stream for the block of positions that starts at k, and its positions and
        // stream asked for ahead at each new line of positions.
        auto stream_step = [&](int64_t k) __attribute__((always_inline)) {
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
            if (streams_ahead && (reinterpret_cast<uintptr_t>(pos + k) & 63) == 0 && k + far < hi) {
                // A new line of positions: the line kProbeStreamAheadBytes on, and the stream's
                // share of its positions (see kProbeStreamAheadBytes).
                __builtin_prefetch(pos + k + far);
                if (!written && sbytes > 0) {
                    const int64_t from = share_end(k + far);
                    prefetch_lines(stream + from, share_end(std::min(hi, k + far + per_line)) - from);
                }
            }
        };
        // Position j's access, clamped into the table, and the request for it ahead.
        auto touch = [&](int64_t j) __attribute__((always_inline)) {
            char* p = tab + std::min(uint64_t(int64_t(pos[j])), lst);
            for (int64_t l = 0; l < nl; ++l) {
                volatile char* b = p + std::min<int64_t>(64 * l, end);
                const char v = *b;
                sum += uint8_t(v);
                if constexpr (Write) *b = v;
            }
        };
        auto ask = [&](int64_t j) __attribute__((always_inline)) {
            const char* q = tab + std::min(uint64_t(int64_t(pos[j])), lst);
            for (int64_t l = 0; l < nl; ++l) __builtin_prefetch(q + 64 * l, Write);
        };
        int64_t k = lo;
        // Positions from k up to `to`, one at a time.
        auto walk_to = [&](int64_t to) __attribute__((always_inline)) {
            for (; k < to; ++k) {
                stream_step(k);
                if (ahd > 0 && k + ahd < hi) ask(k + ahd);
                touch(k);
            }
        };
        // The positions before the first whole block of kStreamBlock, one at a time.
        walk_to(std::min(hi, (lo + kStreamBlock - 1) & ~(kStreamBlock - 1)));
        const int64_t last_block = hi & ~(kStreamBlock - 1);
#if defined(__x86_64__)
        if constexpr (!Write && OneLine) {
            if (gathers && ahd == 0 && k < last_block) {
                // Whole blocks by vector gathers (gathered).
                sum += cpu_has_avx512f() ? gathered(tab, pos, k, last_block, lst, stream_step)
                                         : gathered_avx2(tab, pos, k, last_block, lst, stream_step);
                k = last_block;
            }
        }
#endif
        if constexpr (OneLine) {
            // Whole blocks whose requests ahead stay within the range: the block's stream and its
            // lines of positions asked for once per block, then its positions four at a time, with
            // one check for the four (as gather_elements_at checks its indices) and no other
            // branch, the four clamped one by one where one is out (see the comment above run).
            const int64_t lean_end = ahd > 0 ? std::min(last_block, (hi - ahd) & ~(kStreamBlock - 1)) : last_block;
            for (; k < lean_end; k += kStreamBlock) {
                stream_step(k);
                // The block's other positions that start a line of positions (stream_step's
                // request ahead).
                const uintptr_t at = reinterpret_cast<uintptr_t>(pos + k + 1);
                for (int64_t j = k + 1 + int64_t((64 - (at & 63)) & 63) / int64_t(sizeof(P)); j < k + kStreamBlock;
                     j += per_line)
                    stream_step(j);
                uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (int64_t j = k; j < k + kStreamBlock; j += 4) {
                    if (ahd > 0) ask(j + ahd), ask(j + ahd + 1), ask(j + ahd + 2), ask(j + ahd + 3);
                    const uint64_t a = uint64_t(int64_t(pos[j])), b = uint64_t(int64_t(pos[j + 1]));
                    const uint64_t c = uint64_t(int64_t(pos[j + 2])), d = uint64_t(int64_t(pos[j + 3]));
                    if ((a <= lst) & (b <= lst) & (c <= lst) & (d <= lst)) [[likely]] {
                        if constexpr (Write) {
                            // Each access read, stored back and counted before the next, into one
                            // sum (see the comment above run).
                            for (const uint64_t q : {a, b, c, d}) {
                                volatile char* p = tab + q;
                                const char v = *p;
                                *p = v;
                                s0 += uint8_t(v);
                            }
                        } else {
                            volatile char *pa = tab + a, *pb = tab + b, *pc = tab + c, *pd = tab + d;
                            const char va = *pa, vb = *pb, vc = *pc, vd = *pd;
                            s0 += uint8_t(va), s1 += uint8_t(vb), s2 += uint8_t(vc), s3 += uint8_t(vd);
                        }
                    } else {
                        touch(j), touch(j + 1), touch(j + 2), touch(j + 3);
                    }
                }
                sum += s0 + s1 + s2 + s3;
            }
        }
        walk_to(hi);
        if (written) stream_fence();
        return sum;
    }

    // Every position on this thread, touching only its own part of the work, part `w` of
    // `parts` (see TouchSplit): with `by_lines`, lines [l0, l1) of every access and the same
    // share of each position's stream (run_lines); else the positions in its share of the
    // table, whole, and their stream (run_listed), and, with a checked part (`ranged`), range
    // w of parts of it. Each line of the stream is read once by a thread that needs any of it.
    template <bool Write>
    uint64_t run_part(int w, int parts, bool by_lines) const {
        if (by_lines) return run_lines<Write>(w, parts);
        const uint64_t span_of_table = last + 1;  // positions lie in [0, last]
        // Ranges of the checked part that meet on line boundaries (the last ends with it).
        auto ranged_end = [&](int k) {
            return k == parts ? ranged_bytes : int64_t((__int128)ranged_bytes * k / parts) & ~int64_t(63);
        };
        return run_listed<Write>(uint64_t((unsigned __int128)span_of_table * unsigned(w) / unsigned(parts)),
                                 uint64_t((unsigned __int128)span_of_table * unsigned(w + 1) / unsigned(parts)),
                                 ranged_end(w), ranged_end(w + 1));
    }

    // run_part by lines: every position, lines [l0, l1) of each access (part w of parts).
    template <bool Write>
    uint64_t run_lines(int w, int parts) const {
        char* const tab = table;
        const P* const pos = positions;
        const uint64_t lst = last;
        const int64_t ahd = ahead, end = last_byte, count = n, sbytes = stream_bytes, nl = lines;
        const int64_t per = sbytes % count == 0 ? sbytes / count : -1;
        const auto [l0, l1] = split_range(nl, w, parts);
        // This thread's part of position k's share of the stream, lines [l0, l1) of nl of it: at
        // fixed offsets when every position has the same number of bytes (every case), else by
        // two divisions each.
        const int64_t off0 = per >= 0 ? per * l0 / nl : 0, off1 = per >= 0 ? per * l1 / nl : 0;
        auto part_of_stream = [&](int64_t k) -> std::pair<int64_t, int64_t> {
            if (per >= 0) return {k * per + off0, k * per + off1};
            const int64_t s0 = stream_share_end(k, count, sbytes), len = stream_share_end(k + 1, count, sbytes) - s0;
            return {s0 + len * l0 / nl, s0 + len * l1 / nl};
        };
        uint64_t sum = 0;
        int64_t read_to = 0;  // the stream's lines below this offset have been read
        for (int64_t k = 0; k < count; ++k) {
            // The stream too is asked for ahead: a thread's part of it is not one sequence that
            // the hardware prefetcher follows from a single load (its lines come in pieces).
            if (ahd > 0 && k + ahd < count) {
                const uint64_t q = std::min(uint64_t(int64_t(pos[k + ahd])), lst);
                for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(tab + q + 64 * l, Write);
                if (sbytes > 0) {
                    const auto [a0, a1] = part_of_stream(k + ahd);
                    for (int64_t s = a0 & ~int64_t(63); s < a1; s += 64) __builtin_prefetch(stream + s);
                }
            }
            const uint64_t q = std::min(uint64_t(int64_t(pos[k])), lst);
            if (sbytes > 0) {
                const auto [s0, s1] = part_of_stream(k);
                for (int64_t s = std::max(s0 & ~int64_t(63), read_to); s < s1; s += 64) {
                    sum += uint8_t(*static_cast<const volatile char*>(stream + s));
                    read_to = s + 64;
                }
            }
            for (int64_t l = l0; l < l1; ++l) {
                volatile char* b = tab + q + std::min<int64_t>(64 * l, end);
                const char v = *b;
                sum += uint8_t(v);
                if constexpr (Write) *b = v;
            }
        }
        return sum;
    }

    // run_part by columns: of each row of `fibers` positions (one single element of each fiber,
    // an index along an outermost axis visited in C order), the positions of fibers [c0, c1),
    // part w of parts, with their share of the stream, `ahead` counted in this thread's
    // positions: as a kernel that keeps each fiber on one thread and gives each thread its share
    // of the fibers (the backward of "mul" along an outermost axis, mul_backward).
    template <bool Write>
    uint64_t run_columns(int w, int parts, int64_t fibers) const {
        char* const tab = table;
        const P* const pos = positions;
        const uint64_t lst = last;
        const int64_t ahd = ahead, end = last_byte, count = n, sbytes = stream_bytes, nl = lines;
        const int64_t per = sbytes % count == 0 ? sbytes / count : -1;
        const auto [c0, c1] = split_range(fibers, w, parts);
        auto share_of = [&](int64_t k) -> std::pair<int64_t, int64_t> {
            if (per >= 0) return {k * per, k * per + per};
            return {stream_share_end(k, count, sbytes), stream_share_end(k + 1, count, sbytes)};
        };
        // The position `ahead` own positions on, its row and column kept step by step.
        int64_t ra = 0, ca = c0;
        auto advance = [&](int64_t& r, int64_t& c) {
            if (++c == c1) c = c0, ++r;
        };
        for (int64_t i = 0; i < ahd && c1 > c0; ++i) advance(ra, ca);
        uint64_t sum = 0;
        int64_t read_to = 0;  // the stream's lines below this offset have been read
        for (int64_t r = 0; r * fibers < count; ++r) {
            for (int64_t c = c0; c < c1; ++c, advance(ra, ca)) {
                const int64_t k = r * fibers + c, ka = ra * fibers + ca;
                if (ahd > 0 && ka < count) {
                    const uint64_t q = std::min(uint64_t(int64_t(pos[ka])), lst);
                    for (int64_t l = 0; l < nl; ++l) __builtin_prefetch(tab + q + 64 * l, Write);
                    if (sbytes > 0) {
                        const auto [a0, a1] = share_of(ka);
                        prefetch_lines(stream + a0, a1 - a0);
                    }
                }
                if (sbytes > 0) {
                    const auto [s0, s1] = share_of(k);
                    int64_t s = std::max(s0 & ~int64_t(63), read_to);
                    for (; s < s1; s += 64) sum += uint8_t(*static_cast<const volatile char*>(stream + s));
                    read_to = std::max(read_to, s);
                }
                const uint64_t q = std::min(uint64_t(int64_t(pos[k])), lst);
                for (int64_t l = 0; l < nl; ++l) {
                    volatile char* b = tab + q + std::min<int64_t>(64 * l, end);
                    const char v = *b;
                    sum += uint8_t(v);
                    if constexpr (Write) *b = v;
                }
            }
        }
        return sum;
    }

    // run_part by targets: the positions of each block of kListBlock that lie in this thread's
    // share of the table, [t0, t1), listed without a branch and then touched whole with their
    // stream, `ahead` counted in listed positions, as the kernels' split by target rows does
    // (scatter_by_target_rows). A branch per position on whether it is this thread's
    // mispredicts half the time on random targets (stop 33: standalone, 1e7 float64 adds into
    // 1e5 bins split between two threads, 47-85 ms with the branch, 22-27 listed). Nor does the
    // walk branch on whether a listed position's line of the stream is new to the thread (for 8
    // bytes a position, about one in four, at random): it reads the line each time and counts it
    // once; and it walks a block in a loop of each kind, with a checked part and without, so that
    // the loop without keeps its counters in registers (a profile had the one loop add to a
    // counter on the stack for every position). Stop 69, the Zen 3 machine, old and new builds
    // in alternating processes, five rounds of medians of five calls, two threads, `hist_add`'s
    // targets way: 45.55 -> 39.60 ms at none ahead, 60.08 -> 41.50 at 32; `hist_add_i32`'s 43.96
    // -> 35.89 and 52.80 -> 38.76 (faster in 5 of 5 rounds each; scatterx 12.8-23.2 ms beside).
    // In one build with a switch (four rounds of medians of seven, `hist_add`, none ahead): 44.10
    // ms, 37.73 without the branch, 34.72 with the two loops as well; asking a block ahead for the
    // next block's positions and stream too gained nothing (42.92 against 40.83). The ways of rows
    // within the rounds' spread: `mp_add`'s targets way 8 ahead 9.47 -> 8.72 ms (4 of 5),
    // `mp_add_dense`'s checked way 12.98 -> 13.58 (new faster in 4 of 8 rounds).
    // Since stop 71 the listing goes four positions at a time by AVX2 (listed_avx2); an access of
    // one line whose share of the stream lies within one line is walked without the loops over
    // lines (walk_single); and each block asks for the positions of the block after the one it
    // lists, and for the stream of the one it lists, as scatter_fiber_by_targets asks for its
    // streams ahead. Stop 71, the Zen 3 machine, one build with switches, one process, two
    // threads, four rounds of medians of seven calls, `hist_add`'s targets way none ahead: 65.7 ms
    // as it was, 63.6 with the AVX2 listing, 47.2 with walk_single, 42.8 with both (32 ahead:
    // 67.9 / 65.6 / 50.1 / 44.6); a second build, 42.0 -> 35.0 with the blocks asked for ahead as
    // well (32 ahead 46.8 / 48.4; with stop 69's walk, above, asking gained nothing). Beside them
    // scatterx took 16-21 ms, its own split by targets (set_fiber_split, not its choice on this
    // CPU) 24-26: the way is still slower than both.
    // With a checked part (`ranged`), bytes [r0, r1) of it are read alongside, in order, spread
    // evenly over the positions: each block's share of the range over the positions it lists
    // (scatter_by_target_rows checks its chunks a few rows at a time between the rows it
    // applies), asked for kRangedAhead bytes ahead (with the non-temporal hint where `non_temporal`).
    template <bool Write>
    uint64_t run_listed(uint64_t t0, uint64_t t1, int64_t r0 = 0, int64_t r1 = 0) const {
        char* const tab = table;
        const P* const pos = positions;
        const uint64_t lst = last, width = t1 - t0;
        const int64_t ahd = ahead, end = last_byte, count = n, sbytes = stream_bytes, nl = lines;
        const int64_t per = sbytes % count == 0 ? sbytes / count : -1;
        const bool nta = non_temporal;
        const char* const rs = ranged;
        int64_t rpos = r0;  // the checked part's lines below this offset have been read
        uint64_t rsum = 0;
        auto read_ranged = [&](int64_t upto) {
            for (; rpos < upto; rpos += 64) {
                if (rpos + kRangedAhead < r1) prefetch_read_once(rs + rpos + kRangedAhead, 1, nta);
                rsum += uint8_t(*static_cast<const volatile char*>(rs + rpos));
            }
        };
        // The checked part's offset at which the first `k` positions' share of it ends.
        auto ranged_at = [&](int64_t k) { return r0 + int64_t((__int128)(r1 - r0) * k / count); };
        auto share_of = [&](int64_t k) -> std::pair<int64_t, int64_t> {
            if (per >= 0) return {k * per, k * per + per};
            return {stream_share_end(k, count, sbytes), stream_share_end(k + 1, count, sbytes)};
        };
        // Room for the whole-vector stores of listed_avx2 beyond the last listed position.
        alignas(32) int64_t ks[2 * kListBlock + 4];
        alignas(32) uint64_t qs[2 * kListBlock + 4];
#ifdef SCATTERX_HAVE_F16C_PATH
        const bool by_avx2 = cpu_has_avx2();
#endif
        auto list = [&](int64_t b0, int64_t b1, int64_t m) {
            int64_t k = b0;
#ifdef SCATTERX_HAVE_F16C_PATH
            if (by_avx2) k = listed_avx2(pos, b0, b1, lst, t0, width, ks, qs, m);
#endif
            for (; k < b1; ++k) {
                const uint64_t q = std::min(uint64_t(int64_t(pos[k])), lst);
                ks[m] = k;
                qs[m] = q;
                m += (q - t0) < width;
            }
            return m;
        };
        uint64_t sum = 0;
        int64_t read_to = 0;  // the stream's lines below this offset have been read
        const bool single = nl == 1 && per > 0 && 64 % per == 0;
        const bool blocks_ahead = per >= 0;
        int64_t listed = list(0, std::min(count, kListBlock), 0);
        for (int64_t b0 = 0; b0 < count; b0 += kListBlock) {
            const int64_t b1 = std::min(count, b0 + kListBlock);
            if (blocks_ahead) {
                // The positions of the block after the one listed next, and the stream of the one
                // listed next.
                const int64_t a1 = std::min(count, b1 + kListBlock), a2 = std::min(count, a1 + kListBlock);
                prefetch_lines(reinterpret_cast<const char*>(pos + a1), (a2 - a1) * int64_t(sizeof(P)));
                if (sbytes > 0) {
                    const int64_t from = share_of(b1).first;
                    prefetch_read_once(stream + from, share_of(a1).first - from, nta);
                }
            }
            const int64_t m = list(b1, std::min(count, b1 + kListBlock), listed);
            const int64_t rb0 = ranged_at(b0), rb1 = ranged_at(b1);
            // The block's listed positions, with their share of the checked part where there is
            // one (a loop of each kind: see the comment above run_listed).
            auto walk = [&](auto with_ranged) __attribute__((always_inline)) {
                for (int64_t i = 0; i < listed; ++i) {
                    if constexpr (decltype(with_ranged)::value) read_ranged(rb0 + (rb1 - rb0) * i / listed);
                    if (ahd > 0 && i + ahd < m) {
                        const uint64_t q = qs[i + ahd];
                        for (int64_t l = 0; l < nl; ++l) __builtin_prefetch(tab + q + 64 * l, Write);
                        if (sbytes > 0) {
                            const auto [a0, a1] = share_of(ks[i + ahd]);
                            prefetch_read_once(stream + a0, a1 - a0, nta);
                        }
                    }
                    if (sbytes > 0) {
                        // Every line of the position's share read (as a kernel reads the update of
                        // each element it applies), counted the first time (read_to), without a
                        // branch on whether it is (see the comment above run_listed).
                        const auto [s0, s1] = share_of(ks[i]);
                        for (int64_t s = s0 & ~int64_t(63); s < s1; s += 64) {
                            const uint64_t v = uint8_t(*static_cast<const volatile char*>(stream + s));
                            sum += v & (uint64_t(0) - uint64_t(s >= read_to));
                            read_to = std::max(read_to, s + 64);
                        }
                    }
                    const uint64_t q = qs[i];
                    for (int64_t l = 0; l < nl; ++l) {
                        volatile char* b = tab + q + std::min<int64_t>(64 * l, end);
                        const char v = *b;
                        sum += uint8_t(v);
                        if constexpr (Write) *b = v;
                    }
                }
            };
            // Accesses of one line whose share of the stream lies within one line (`single`): the
            // same reads without the loops over lines, and the stream's lines in order (each
            // position's line is the one last read or a later one).
            auto walk_single = [&]() __attribute__((always_inline)) {
                for (int64_t i = 0; i < listed; ++i) {
                    if (ahd > 0 && i + ahd < m) {
                        __builtin_prefetch(tab + qs[i + ahd], Write);
                        prefetch_read_once(stream + ks[i + ahd] * per, 1, nta);
                    }
                    const int64_t s = (ks[i] * per) & ~int64_t(63);
                    const uint64_t v = uint8_t(*static_cast<const volatile char*>(stream + s));
                    sum += v & (uint64_t(0) - uint64_t(s >= read_to));
                    read_to = s + 64;
                    volatile char* b = tab + qs[i];
                    const char c = *b;
                    sum += uint8_t(c);
                    if constexpr (Write) *b = c;
                }
            };
            if (rs) walk(std::true_type{});
            else if (single) walk_single();
            else walk(std::false_type{});
            if (rs) read_ranged(rb1);
            std::copy(ks + listed, ks + m, ks);
            std::copy(qs + listed, qs + m, qs);
            listed = m - listed;
        }
        return sum + rsum;
    }

#ifdef SCATTERX_HAVE_F16C_PATH
    // run_listed's listing by AVX2, four positions at a time: of positions [k0, k1), each clamped
    // to `last`, those in [t0, t0 + width) are appended to qs (the clamped position) and ks (its
    // number) from m on, by a compress of the four lanes (append_kept4, as list_own_avx2 lists a
    // fiber's own targets), m counting them; returns the first position not looked at (fewer
    // than four are left, for the caller's loop). The lists need room for four entries beyond
    // the last one listed. Unsigned lanes are compared signed with their sign bits flipped.
    __attribute__((target("avx2"))) static int64_t listed_avx2(const P* pos, int64_t k0, int64_t k1, uint64_t last,
                                                               uint64_t t0, uint64_t width, int64_t* ks, uint64_t* qs,
                                                               int64_t& m) {
        const __m256i sign = _mm256_set1_epi64x(INT64_MIN), last64 = _mm256_set1_epi64x(int64_t(last));
        const __m256i last_flipped = _mm256_xor_si256(last64, sign), from = _mm256_set1_epi64x(int64_t(t0));
        const __m256i width_flipped = _mm256_set1_epi64x(int64_t(width) ^ INT64_MIN), four = _mm256_set1_epi64x(4);
        __m256i at = _mm256_add_epi64(_mm256_setr_epi64x(0, 1, 2, 3), _mm256_set1_epi64x(k0));
        int64_t k = k0, listed = m;
        for (; k + 4 <= k1; k += 4) {
            __m256i q = load4_as_int64(pos + k);
            q = _mm256_blendv_epi8(q, last64, _mm256_cmpgt_epi64(_mm256_xor_si256(q, sign), last_flipped));
            const __m256i own = _mm256_cmpgt_epi64(width_flipped, _mm256_xor_si256(_mm256_sub_epi64(q, from), sign));
            listed = append_kept4(own, q, at, qs, ks, listed);
            at = _mm256_add_epi64(at, four);
        }
        m = listed;
        return k;
    }
#endif

#if defined(__x86_64__)
    // The sum of the bytes at positions [k0, k1) of the table (each clamped to `last`; k0 and
    // k1 multiples of kStreamBlock), read by vector gathers, each the aligned 4 bytes that hold
    // its byte (of the same line), with step(k) (the stream's share) before each block of
    // kStreamBlock positions at k: eight or sixteen reads per instruction, where the scalar
    // walk spends a dozen instructions on each, and its misses in flight are bounded by how
    // many of those the core holds at once (our reading). For the reads of single random
    // elements (`gather_max0`), whose scalar walks were all slower than scatterx's gather loop
    // (stop 59). Only where the table's size is a multiple of 4 (touch_lines), so that no read
    // passes its end, and with int32 positions for a table of at most INT32_MAX bytes.
    template <class Step>
    __attribute__((target("avx512f"))) static uint64_t gathered(const char* tab, const P* pos, int64_t k0, int64_t k1,
                                                                uint64_t last, Step&& step) {
        static_assert(kStreamBlock == 16, "two vectors of 8 or one of 16 positions");
        __m512i sum = _mm512_setzero_si512();
        const __m512i byte = _mm512_set1_epi32(0xff), three = _mm512_set1_epi32(3);
        const __m512i align32 = _mm512_set1_epi32(~3), last32 = _mm512_set1_epi32(int32_t(last));
        const __m512i align64 = _mm512_set1_epi64(~int64_t(3)), last64 = _mm512_set1_epi64(int64_t(last));
        for (int64_t k = k0; k < k1; k += kStreamBlock) {
            step(k);
            if constexpr (sizeof(P) == 8) {
                for (int h = 0; h < 2; ++h) {
                    const __m512i q = _mm512_min_epu64(_mm512_loadu_si512(pos + k + 8 * h), last64);
                    const __m256i words = _mm512_i64gather_epi32(_mm512_and_si512(q, align64), tab, 1);
                    const __m256i shift = _mm256_slli_epi32(
                        _mm256_and_si256(_mm512_cvtepi64_epi32(q), _mm512_castsi512_si256(three)), 3);
                    const __m256i b = _mm256_and_si256(_mm256_srlv_epi32(words, shift), _mm512_castsi512_si256(byte));
                    sum = _mm512_add_epi64(sum, _mm512_cvtepu32_epi64(b));
                }
            } else {
                const __m512i q = _mm512_min_epu32(_mm512_loadu_si512(pos + k), last32);
                const __m512i words = _mm512_i32gather_epi32(_mm512_and_si512(q, align32), tab, 1);
                const __m512i shift = _mm512_slli_epi32(_mm512_and_si512(q, three), 3);
                const __m512i b = _mm512_and_si512(_mm512_srlv_epi32(words, shift), byte);
                sum = _mm512_add_epi64(sum, _mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(b)),
                                                             _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(b, 1))));
            }
        }
        return uint64_t(_mm512_reduce_add_epi64(sum));
    }
    // gathered by AVX2, for CPUs without AVX-512F: four reads per instruction for int64
    // positions, eight for int32. AVX2 has no unsigned 64-bit minimum: a position beyond `last`
    // (unsigned, so a negative one too) is found by a signed compare of both with their sign bits
    // flipped. Stop 67, the Zen 3 machine (no AVX-512), standalone, two threads, the gather of
    // `gather_max0` (single random elements of a 12.8 MB table): a plain loop 7.87-8.39 ms, the
    // loop by AVX2 gathers 7.86-8.50, where the probe's scalar walks took 20.6 (at 128 ahead, its
    // fastest) against scatterx's 10.3 in a run of the bench (docs/performance.md, stop 67).
    template <class Step>
    __attribute__((target("avx2"))) static uint64_t gathered_avx2(const char* tab, const P* pos, int64_t k0, int64_t k1,
                                                                  uint64_t last, Step&& step) {
        static_assert(kStreamBlock == 16, "four vectors of 4 or two of 8 positions");
        const int* words_at = reinterpret_cast<const int*>(tab);
        __m256i sum = _mm256_setzero_si256();
        const __m256i byte = _mm256_set1_epi32(0xff), three = _mm256_set1_epi32(3);
        const __m256i sign = _mm256_set1_epi64x(INT64_MIN), last64 = _mm256_set1_epi64x(int64_t(last));
        const __m256i last_flipped = _mm256_xor_si256(last64, sign), align64 = _mm256_set1_epi64x(~int64_t(3));
        const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
        const __m256i last32 = _mm256_set1_epi32(int32_t(last)), align32 = _mm256_set1_epi32(~3);
        for (int64_t k = k0; k < k1; k += kStreamBlock) {
            step(k);
            if constexpr (sizeof(P) == 8) {
                for (int h = 0; h < 4; ++h) {
                    __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pos + k + 4 * h));
                    q = _mm256_blendv_epi8(q, last64, _mm256_cmpgt_epi64(_mm256_xor_si256(q, sign), last_flipped));
                    const __m128i words = _mm256_i64gather_epi32(words_at, _mm256_and_si256(q, align64), 1);
                    // Each position's place in its word, from the low half of its lane.
                    const __m128i low = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(q, low_halves));
                    const __m128i shift = _mm_slli_epi32(_mm_and_si128(low, _mm256_castsi256_si128(three)), 3);
                    const __m128i b = _mm_and_si128(_mm_srlv_epi32(words, shift), _mm256_castsi256_si128(byte));
                    sum = _mm256_add_epi64(sum, _mm256_cvtepu32_epi64(b));
                }
            } else {
                for (int h = 0; h < 2; ++h) {
                    const __m256i* at = reinterpret_cast<const __m256i*>(pos + k + 8 * h);
                    const __m256i q = _mm256_min_epu32(_mm256_loadu_si256(at), last32);
                    const __m256i words = _mm256_i32gather_epi32(words_at, _mm256_and_si256(q, align32), 1);
                    const __m256i shift = _mm256_slli_epi32(_mm256_and_si256(q, three), 3);
                    const __m256i b = _mm256_and_si256(_mm256_srlv_epi32(words, shift), byte);
                    const __m256i lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(b));
                    const __m256i hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256(b, 1));
                    sum = _mm256_add_epi64(sum, _mm256_add_epi64(lo, hi));
                }
            }
        }
        const __m128i pair = _mm_add_epi64(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        return uint64_t(_mm_cvtsi128_si64(pair)) + uint64_t(_mm_extract_epi64(pair, 1));
    }
#endif

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

// How the threads share a probe's accesses. A kernel may deal out the updates by contiguous
// ranges (`ranges`) only when their order does not matter; the float adds or products of a
// fiber must be applied in the order of the indices (SPEC section 2), which leaves a kernel the
// other ways: one thread walks every position while a second reads the streams ahead of it
// (`reader`, the one-fiber scatter's strategy); each thread walks every position and applies
// those whose target lies in its share of the table (`targets`, the row scatter's split); each
// thread walks every position and applies its share of the lines of each access, the fibers of
// a row that it owns (`lines`). The probe of such a case tries only those (stop 27: for the
// message-passing rows, in a standalone copy, two threads applying contiguous halves of the
// rows took 9-10 ms where the legal splits took 15-26: each thread then still reads nearly
// every line of the update stream, since its own rows are interleaved with the other's; the
// `targets` way then had a branch per position, see run_listed).
// A materialised expanded index (the `_dense` message passing) is a part of the stream that a
// kernel must read whole, to know that each of its rows holds one value, and that it may read by
// contiguous ranges whatever way it applies the rows: scatterx checks it in chunks claimed in
// turn by its threads, and applies the rows by target. The `checked` way does that: as `targets`,
// except that the last `checked` bytes of the stream (the index) are read by contiguous ranges,
// each thread its range spread over its walk, and the stream is asked for with the hint that
// scatter_by_target_rows asks for such an index and its update rows with on this CPU
// (read_once_non_temporal; stop 55; until then the probe shared the index rows like the targets
// in every way, and was slower than scatterx).
// Ordered fibers of single elements along an outermost axis (the positions in rows of `fibers`,
// one element of each fiber a row) may also be shared by fibers: the `columns` way gives each
// thread the positions of its share of the fibers, as scatterx's backward of "mul" gives each
// thread its share of the columns (since stop 62; until then that backward's probe had only
// `reader` and `targets`, both slower than scatterx, so its case had no floor).
enum class TouchSplit : int { ranges = 0, reader = 1, targets = 2, lines = 3, checked = 4, columns = 5 };

// Touches `span` bytes at each byte offset positions[k] of `table` (`nbytes` long), in order:
// one byte per 64-byte line is read, and with `write` stored back unchanged (the line then has
// to be written back, as a scatter's would). Alongside, the `stream` (`stream_bytes` long, or
// null: the values that move in sequence with the targets, one per index) is read one byte per
// line, in step with the positions: the share of each block of kStreamBlock positions before
// they are touched. The threads share the work as `split` says (TouchSplit): by default each
// takes a contiguous range of positions and their share of the stream; a position is clamped
// into the table (never out of bounds). Returns a value computed from the bytes read, so that
// the reads cannot be dropped.
// Accesses are prefetched `ahead` positions before they are made (the best distance depends on
// the pattern and the machine: the caller tries several); with `ahead` 0 none is, and a walk by
// ranges that reads one line per access reads whole blocks of positions by vector gathers where
// the CPU has AVX-512F (TouchRange::gathered; since stop 60) or AVX2 (gathered_avx2; since stop
// 67). A walk by ranges (and of one thread) asks for its positions, and for the stream it reads, a
// fixed distance ahead (kProbeStreamAheadBytes), and so does the one walk of `reader` where the
// one-fiber scatter asks for its streams (fiber_streams_ahead; since stop 70); the walks of the
// other splits ask for their streams `ahead` positions ahead.
//
// With `stream_written`, the stream is what the kernel writes (a gather's result, the update
// gradients of a scatter's backward), and it is written in full by streaming stores, as a large
// call's kernel writes it, rather than read a byte per line: on the Zen 3 machine a read of each
// line cost more than the streaming stores of the whole stream (stop 23: the probe of
// `gather_hist`, two threads, 31 ms with its stream read, 16.5 ms without a stream, where
// scatterx, writing the stream, took 16.4).
//
// With `reader`, one thread walks every position, and a second, when the pool has one, reads
// the positions and the stream ahead of it (read_ahead). With `targets`, `lines` or `checked`
// (run_part) every thread walks every position; `checked` reads the stream's last `checked`
// bytes by ranges (other splits, and one thread, read the stream as one). The stream is written
// (`stream_written`) only by ranges; the other splits read it. The positions are read as the
// indices they stand for would be: for an int32 index, int32 positions.
//
// With `then`, a second pass over the same positions follows the first (touching with
// then->write, the stream written when then->stream_written): a backward whose updates need what
// every other update of their target brought there (the ties of max and min, the prefix and
// suffix products of mul). With ranges the two passes alternate by blocks of `block` positions
// (0: all), each thread both passes over a block before the next: the positions of
// one coordinate before the axis (a slab of a middle axis) are all a kernel needs for both, and
// a second pass over all positions after the first would read them from memory again, where a
// kernel reads them from its cache; each thread takes whole blocks, or, with fewer blocks than
// threads, the passes go over ranges of all positions, the second after every thread's first
// (the targets of a block may then lie in every range). The other splits (ordered fibers, one
// pass) take the passes whole, one after the other.
struct TouchPass {
    bool write;
    bool stream_written;
};
template <class P>
uint64_t touch_lines(char* table, int64_t nbytes, const P* positions, int64_t n, int64_t span, bool write,
                     int64_t ahead, const char* stream = nullptr, int64_t stream_bytes = 0,
                     TouchSplit split = TouchSplit::ranges, bool stream_written = false,
                     const TouchPass* then = nullptr, int64_t block = 0, int64_t checked = 0, int64_t fibers = 0) {
    if (n == 0 || nbytes < span || span <= 0) return 0;
    if (then && split != TouchSplit::ranges)
        return touch_lines(table, nbytes, positions, n, span, write, ahead, stream, stream_bytes, split, stream_written,
                           nullptr, 0, checked, fibers) +
               touch_lines(table, nbytes, positions, n, span, then->write, ahead, stream, stream_bytes, split,
                           then->stream_written, nullptr, 0, checked, fibers);
    if (!stream) stream_bytes = 0;
    checked = std::clamp<int64_t>(checked, 0, stream_bytes);
    // One contiguous range per thread (measured: 64 smaller ranges dealt out in turn took 50 ms
    // where two halves took 43; two threads each touching the positions of its own half of the
    // table, or one touching all while the other read ahead, were never faster than ranges).
    const bool ranges = split == TouchSplit::ranges;
    const int parts = int(std::min<int64_t>(ThreadPool::instance().num_threads(), std::max<int64_t>(1, n / kTouchGrain)));
    TouchRange<P> walk{table, uint64_t(nbytes - span), positions, n, (span + 63) / 64,
                       std::max<int64_t>(0, ahead), stream, stream_bytes, span - 1,
                       stream_written && stream_bytes > 0 && ranges};
#if defined(__x86_64__)
    // int32 positions gather by int32 offsets: only for a table they can clamp into.
    walk.gathers = (cpu_has_avx512f() || cpu_has_avx2()) && nbytes % 4 == 0 && (sizeof(P) == 8 || nbytes <= INT32_MAX);
#endif
    TouchRange<P> again = walk;
    if (then) again.stream_written = then->stream_written && stream_bytes > 0;
    auto one_pass = [&](const TouchRange<P>& wk, bool wr, int64_t lo, int64_t hi, std::atomic<int64_t>* progress) {
        if (wk.lines == 1)
            return wr ? wk.template run<true, true>(lo, hi, progress) : wk.template run<false, true>(lo, hi, progress);
        return wr ? wk.template run<true, false>(lo, hi, progress) : wk.template run<false, false>(lo, hi, progress);
    };
    auto walk_range = [&](int64_t lo, int64_t hi, std::atomic<int64_t>* progress) {
        return one_pass(walk, write, lo, hi, progress);
    };
    std::atomic<uint64_t> total{0};
    // The sum of part(p) over p < shares, the parts dealt out to the threads.
    auto run_shares = [&](int shares, auto&& part) {
        ThreadPool::instance().run(shares, [&](int w, int nw) {
            uint64_t sum = 0;
            for (int p = w; p < shares; p += nw) sum += part(p);
            total.fetch_add(sum, std::memory_order_relaxed);
        });
        return total.load();
    };
    if (!ranges && parts < 2) return walk_range(0, n, nullptr);
    if (split == TouchSplit::targets || split == TouchSplit::lines || split == TouchSplit::checked) {
        const bool by_lines = split == TouchSplit::lines;
        const int shares = by_lines ? int(std::min<int64_t>(parts, walk.lines)) : parts;
        if (shares < 2) return walk_range(0, n, nullptr);
        TouchRange<P> own = walk;
        if (split == TouchSplit::checked) {
            own.stream_bytes = stream_bytes - checked;
            own.ranged = checked > 0 ? stream + own.stream_bytes : nullptr;
            own.ranged_bytes = checked;
            own.non_temporal = read_once_non_temporal();
        }
        return run_shares(shares, [&](int part) {
            return write ? own.template run_part<true>(part, shares, by_lines)
                         : own.template run_part<false>(part, shares, by_lines);
        });
    }
    if (split == TouchSplit::columns) {
        // Rows of `fibers` positions (n a multiple of it), each thread its share of the fibers.
        const int shares = int(std::min<int64_t>(parts, fibers));
        if (shares < 2 || fibers <= 0 || n % fibers != 0) return walk_range(0, n, nullptr);
        return run_shares(shares, [&](int part) {
            return write ? walk.template run_columns<true>(part, shares, fibers)
                         : walk.template run_columns<false>(part, shares, fibers);
        });
    }
    if (split == TouchSplit::reader) {
        // The stream as n values of `item` bytes (the last stream_bytes % n bytes left out).
        const int64_t item = stream_bytes / n;
        // The walk asks for its streams ahead where the one-fiber scatter, whose strategy this is,
        // asks for its own (ScatterBlock::fiber, fiber_streams_ahead; see the comment above run).
        walk.streams_ahead = fiber_streams_ahead();
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
    // Each part's sum from part(p), the parts dealt out to the threads.
    auto run_parts = [&](auto&& part) { run_shares(parts, part); };
    auto range_pass = [&](const TouchRange<P>& wk, bool wr) {
        run_parts([&](int p) {
            auto [lo, hi] = split_range(n, p, parts);
            return one_pass(wk, wr, lo, hi, nullptr);
        });
    };
    if (!then) {
        range_pass(walk, write);
        return total.load();
    }
    const int64_t step = block > 0 ? std::min(block, n) : n, blocks = (n + step - 1) / step;
    if (blocks < parts) {
        // Fewer blocks than threads (one, for an outermost axis): a target's positions may lie
        // in every thread's range, so the second pass starts once every thread's first is done.
        range_pass(walk, write);
        range_pass(again, then->write);
        return total.load();
    }
    // Whole blocks to each thread, both passes over a block before the next.
    run_parts([&](int p) {
        auto [b0, b1] = split_range(blocks, p, parts);
        uint64_t sum = 0;
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t lo = b * step, hi = std::min(n, lo + step);
            sum += one_pass(walk, write, lo, hi, nullptr) + one_pass(again, then->write, lo, hi, nullptr);
        }
        return sum;
    });
    return total.load();
}

// The ordered loop of one fiber of float adds, alone: table[positions[k]] += values[k] for k in
// [0, stretch), that stretch applied over and over until n updates are done, in order, on the
// calling thread. SPEC section 2 orders each target's adds; a kernel that keeps such a fiber (a
// 1-D histogram) on one thread, as scatterx's does, cannot take less time than this loop,
// whatever else it overlaps with it (reading the streams, on a second thread); one that splits
// the bins between threads is measured by the probe's `targets` way instead. With a
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

// Both streams of one fiber read whole by each of the pool's threads (kSplitFiberParts at most),
// alone: the index (n elements of isize bytes at iv) and the updates (n of usize bytes at uv), a
// byte of every line, in blocks of kOwnListBlock elements, each block's lines asked for
// kFiberStreamAhead elements ahead, as scatter_fiber_by_targets walks them. A split of a 1-D
// histogram's bins between threads has each thread read every index (to find its own) and every
// line of the updates (its own lie on all of them), as this walk does (on one thread: as a kernel
// that keeps the fiber on one thread reads them); the listing and the adds come on top. A
// measurement of the machine, as the touch probe is, of what those kernels read only: one whose
// threads handed each other what they read would read each stream once. Returns the sum of the
// bytes read (so that no read is left out).
inline uint64_t read_streams_whole(const char* iv, int64_t isize, const char* uv, int64_t usize, int64_t n) {
    std::atomic<uint64_t> total{0};
    ThreadPool::instance().run(kSplitFiberParts, [&](int, int) {
        uint64_t sum = 0;
        // A byte of each line of the stream at `base` that starts within its bytes [from, to), and
        // its first byte where `from` is 0: each line once, wherever the stream starts.
        auto lines = [&sum](const char* base, int64_t from, int64_t to) {
            uintptr_t a = reinterpret_cast<uintptr_t>(base) + uintptr_t(from);
            if (from > 0) a = (a + 63) & ~uintptr_t(63);
            const uintptr_t end = reinterpret_cast<uintptr_t>(base) + uintptr_t(to);
            for (; a < end; a = (a | 63) + 1) sum += *reinterpret_cast<const unsigned char*>(a);
        };
        for (int64_t b0 = 0; b0 < n; b0 += kOwnListBlock) {
            const int64_t b1 = std::min(n, b0 + kOwnListBlock);
            ask_fiber_streams_ahead(iv, isize, uv, usize, b0, b1, n);
            lines(iv, b0 * isize, b1 * isize);
            lines(uv, b0 * usize, b1 * usize);
        }
        total.fetch_add(sum, std::memory_order_relaxed);
    });
    return total.load();
}

}  // namespace scatterx
