// A small persistent thread pool. The calling thread takes part as worker 0. When another
// caller already holds the pool (several Python threads at once), the work runs serially in the
// caller: results never depend on how many threads ran it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace scatterx {

class ThreadPool {
  public:
    static ThreadPool& instance() {
        static ThreadPool* pool = new ThreadPool();  // never destroyed: safe at interpreter exit
        return *pool;
    }

    int num_threads() const { return num_threads_.load(std::memory_order_relaxed); }
    void set_num_threads(int n) { num_threads_.store(std::max(1, n), std::memory_order_relaxed); }

    // Runs fn(worker, n_workers) on up to `want` workers and returns when all are done.
    void run(int want, const std::function<void(int, int)>& fn) {
        int n = std::min(want, num_threads());
        std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
        if (n <= 1 || !busy.owns_lock()) {
            fn(0, 1);
            return;
        }
        ensure_workers(n - 1);
        {
            std::lock_guard<std::mutex> lk(m_);
            task_ = &fn;
            task_workers_ = n;
            pending_.store(n - 1, std::memory_order_relaxed);
            generation_.fetch_add(1, std::memory_order_release);
        }
        cv_.notify_all();
        fn(0, n);
        auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
        if (!spin_until(done)) {
            std::unique_lock<std::mutex> lk(m_);
            done_cv_.wait(lk, done);
        }
    }

  private:
    ThreadPool() {
        unsigned hw = std::thread::hardware_concurrency();
        num_threads_ = hw ? int(hw) : 1;
    }

    // Waking a sleeping thread takes tens of microseconds here (a futex, and on a virtual
    // machine an idle virtual CPU to resume): a last-axis gather of 512 x 256 float32 took
    // 101-110 us on two threads, about as long as on one; 76 us with the poll. So a worker that
    // has finished, and the caller that waits for the workers, first poll for up to kSpinMicros
    // before they sleep, as onnxruntime's and OpenMP's pools do.
    static constexpr int64_t kSpinMicros = 100;
    template <class Pred> static bool spin_until(Pred&& pred) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
        for (;;) {
            for (int k = 0; k < 64; ++k) {
                if (pred()) return true;
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            }
            if (std::chrono::steady_clock::now() >= end) return pred();
        }
    }

    void ensure_workers(int n) {
        while (int(workers_.size()) < n) {
            int id = int(workers_.size()) + 1;
            workers_.emplace_back([this, id] { loop(id); });
            workers_.back().detach();
        }
    }

    void loop(int id) {
        uint64_t seen = 0;
        for (;;) {
            auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen; };
            if (!spin_until(fresh)) {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, fresh);
            }
            const std::function<void(int, int)>* task;
            int n;
            {
                std::lock_guard<std::mutex> lk(m_);
                seen = generation_.load(std::memory_order_relaxed);
                task = task_;
                n = task_workers_;
            }
            if (id < n) {
                (*task)(id, n);
                if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                    std::lock_guard<std::mutex> lk(m_);
                    done_cv_.notify_one();
                }
            }
        }
    }

    std::atomic<int> num_threads_;
    std::mutex busy_;
    std::mutex m_;
    std::condition_variable cv_, done_cv_;
    std::vector<std::thread> workers_;
    const std::function<void(int, int)>* task_ = nullptr;
    int task_workers_ = 0;
    std::atomic<int> pending_{0};
    std::atomic<uint64_t> generation_{0};
};

// Runs fn(part) for every part in [0, parts), on up to `parts` workers. Parts are handed out one
// at a time as workers come free rather than dealt in advance: on a virtual machine whose host
// takes a CPU away for milliseconds, or whose second worker is slow to wake, the others take the
// rest of the work instead of waiting for that worker's share. Which worker runs a part never
// changes what the part computes.
template <class Fn> void parallel_parts(int parts, Fn&& fn) {
    if (parts <= 1) {
        if (parts == 1) fn(0);
        return;
    }
    std::atomic<int> next{0};
    ThreadPool::instance().run(parts, [&](int, int) {
        for (int part; (part = next.fetch_add(1, std::memory_order_relaxed)) < parts;) fn(part);
    });
}

// Splits [0, n) into `parts` contiguous ranges; returns the range of `part`.
inline std::pair<int64_t, int64_t> split_range(int64_t n, int part, int parts) {
    int64_t base = n / parts, extra = n % parts;
    int64_t lo = part * base + std::min<int64_t>(part, extra);
    return {lo, lo + base + (part < extra ? 1 : 0)};
}

}  // namespace scatterx
