// A small persistent thread pool. The calling thread takes part as worker 0. When another
// caller already holds the pool (several Python threads at once), the work runs serially in the
// caller: results never depend on how many threads ran it.
#pragma once

#include <algorithm>
#include <atomic>
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
            pending_ = n - 1;
            ++generation_;
        }
        cv_.notify_all();
        fn(0, n);
        std::unique_lock<std::mutex> lk(m_);
        done_cv_.wait(lk, [&] { return pending_ == 0; });
        task_ = nullptr;
    }

  private:
    ThreadPool() {
        unsigned hw = std::thread::hardware_concurrency();
        num_threads_ = hw ? int(hw) : 1;
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
            const std::function<void(int, int)>* task;
            int n;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return generation_ != seen; });
                seen = generation_;
                task = task_;
                n = task_workers_;
            }
            if (id < n) {
                (*task)(id, n);
                std::lock_guard<std::mutex> lk(m_);
                if (--pending_ == 0) done_cv_.notify_one();
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
    int pending_ = 0;
    uint64_t generation_ = 0;
};

// Splits [0, n) into `parts` contiguous ranges; returns the range of `part`.
inline std::pair<int64_t, int64_t> split_range(int64_t n, int part, int parts) {
    int64_t base = n / parts, extra = n % parts;
    int64_t lo = part * base + std::min<int64_t>(part, extra);
    return {lo, lo + base + (part < extra ? 1 : 0)};
}

}  // namespace scatterx
