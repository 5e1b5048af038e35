#include "engine/cpu/tile_pool.hpp"

#include <stdexcept>
#include <string>
#include <system_error>

namespace engine::cpu {

TilePool::TilePool(int workers) {
  try {
    threads_.reserve(size_t(workers > 0 ? workers : 0));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { worker(i); });
  } catch (const std::exception& e) {
    // The destructor does not run for a half-built pool: stop and join the workers that started,
    // or they would wait forever on a condition variable that is about to be destroyed.
    const size_t started = threads_.size();
    stop_workers();
    throw std::runtime_error("the cpu backend could not start its " + std::to_string(workers + 1) +
                             " threads (" + std::to_string(started + 1) + " started: " + e.what() +
                             "); ask for fewer with --threads");
  }
}

TilePool::~TilePool() { stop_workers(); }

void TilePool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

bool TilePool::claim(uint32_t generation, int items, int& item) {
  uint64_t v = next_.load(std::memory_order_relaxed);
  for (;;) {
    // A stale generation: the job this thread woke for is over and another may be running.
    if (uint32_t(v >> 32) != generation || int(uint32_t(v)) >= items) return false;
    if (next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      item = int(uint32_t(v));
      return true;
    }
  }
}

void TilePool::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    Fn fn;
    void* context;
    int items;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= helpers_) continue;  // this job asked for fewer threads
      fn = fn_, context = context_, items = items_;
    }
    int item = 0;
    while (claim(seen, items, item)) {
      fn(context, item, index + 1);
      done_.fetch_add(1, std::memory_order_release);
    }
  }
}

void TilePool::run(int items, int threads, Fn fn, void* context) {
  if (threads > int(threads_.size()) + 1) threads = int(threads_.size()) + 1;
  if (threads <= 1 || items <= 1) {
    for (int i = 0; i < items; ++i) fn(context, i, 0);
    return;
  }
  uint32_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = ++generation_;
    fn_ = fn, context_ = context, items_ = items, helpers_ = threads - 1;
    done_.store(0, std::memory_order_relaxed);
    next_.store(uint64_t(generation) << 32, std::memory_order_release);
  }
  wake_.notify_all();
  int item = 0;
  while (claim(generation, items, item)) {
    fn(context, item, 0);
    done_.fetch_add(1, std::memory_order_release);
  }
  // Only items that other threads claimed are left: wait for those (spin briefly, then yield).
  for (int spins = 0; done_.load(std::memory_order_acquire) < items; ++spins)
    if (spins > 1000) std::this_thread::yield();
}

}  // namespace engine::cpu
