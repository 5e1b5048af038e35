#pragma once
// The cpu backend's threads: the caller plus `workers` threads made once (at compile), handing out
// items (tiles, images) one at a time from a shared counter.
//
// Why not `omp parallel for`: its join waits for every thread of the team to arrive, even one that
// got no item because it had not been scheduled yet. On a machine whose cores are shared with other
// processes that wait is a scheduler time slice (milliseconds) per call, which can make 2 threads
// far slower than 1 (the cpu backend's design, docs/design/). Here the caller
// takes every item nobody has claimed and waits only for items other threads are running; a worker
// that wakes after the job is over finds nothing to claim.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace engine::cpu {

class TilePool {
 public:
  using Fn = void (*)(void* context, int item, int thread);

  // Starts `workers` threads; throws std::runtime_error (naming the count) when the system cannot
  // start them all, after stopping those that did start.
  explicit TilePool(int workers);
  ~TilePool();
  TilePool(const TilePool&) = delete;
  TilePool& operator=(const TilePool&) = delete;

  // fn(context, item, thread) for every item in [0, items), on the caller (thread 0) and at most
  // threads - 1 workers (threads 1..); returns when all are done. fn must not throw.
  void run(int items, int threads, Fn fn, void* context);

 private:
  void worker(int index);
  void stop_workers();
  // Claims the next item of job `generation`; false when that job has no item left (or is over).
  bool claim(uint32_t generation, int items, int& item);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint32_t generation_ = 0;  // the current job (guarded by mutex_)
  Fn fn_ = nullptr;
  void* context_ = nullptr;
  int items_ = 0, helpers_ = 0;
  std::atomic<uint64_t> next_{0};  // generation << 32 | next item
  std::atomic<int> done_{0};
};

}  // namespace engine::cpu
