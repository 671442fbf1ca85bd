// Stress test of the native thread pool (cpp/include/scatterx/parallel.h), meant for
// ThreadSanitizer: 20 000 runs of 1 to 4 workers over three threads, with pauses that let the
// workers go to sleep between bursts (both wake paths: the poll and the condition variable), then
// two callers at once (one gets the pool, the other runs serially). Every run checks its output.
//
//   g++ -O1 -g -std=c++20 -fsanitize=thread -Icpp/include scripts/pool_stress.cpp -o /tmp/pool_stress -lpthread
//   /tmp/pool_stress    # prints "errors 0" and exits 0; ThreadSanitizer reports any race
#include "scatterx/parallel.h"
#include <cstdio>
#include <thread>
#include <vector>
using namespace scatterx;
int main() {
  auto& pool = ThreadPool::instance();
  pool.set_num_threads(3);
  std::vector<long> out(1000);
  long errors = 0;
  for (int it = 0; it < 20000; ++it) {
    int want = 1 + it % 4;
    std::fill(out.begin(), out.end(), 0);
    pool.run(want, [&](int w, int nw) {
      auto [lo, hi] = split_range(1000, w, nw);
      for (long i = lo; i < hi; ++i) out[i] = i * 2 + it;
    });
    for (long i = 0; i < 1000; ++i) errors += out[i] != i * 2 + it;
    if (it % 1000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));  // let workers sleep
  }
  // Two callers at once: one gets the pool, the other runs serially.
  long errors2 = 0;
  std::thread other([&] { for (int it = 0; it < 2000; ++it) { std::vector<long> v(100); pool.run(2, [&](int w, int nw) { auto [lo, hi] = split_range(100, w, nw); for (long i = lo; i < hi; ++i) v[i] = i; }); for (long i = 0; i < 100; ++i) errors2 += v[i] != i; } });
  for (int it = 0; it < 2000; ++it) { std::vector<long> v(100); pool.run(3, [&](int w, int nw) { auto [lo, hi] = split_range(100, w, nw); for (long i = lo; i < hi; ++i) v[i] = -i; }); for (long i = 0; i < 100; ++i) errors += v[i] != -i; }
  other.join(); errors += errors2;
  std::printf("errors %ld\n", errors);
  return errors != 0;
}
