#pragma once
// Several executables of one model (one per GPU, or two on one GPU in tests) driven as one.
// Backend-neutral: each part binds to its device itself (engine/gpu/device_executable.hpp); this
// class only splits the work, runs the parts on their own host threads and gathers nothing, because
// every part writes straight into the caller's output arrays at its share's offset.
//
// The split is by whole batches of the stream's `batch`: part d takes the contiguous batches
// [ceil(d * B / N), ceil((d + 1) * B / N)) of the B batches. Every batch therefore has the same size as on one
// device (only the stream's last batch is short, as on one device), so a backend whose output for a
// batch depends only on that batch gives the same bits as one device, whatever it does with n.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/backend.hpp"

namespace engine {

// "all" or "0,1,...": distinct indices in 0..available-1, in the order given. Throws
// std::invalid_argument naming the problem (empty, not a number, duplicate, out of range, or no
// device at all).
std::vector<int> parse_device_list(const std::string& text, int available);

// The contiguous range of stream images part `part` of `parts` runs: [first, first + count).
struct Share {
  int64_t first = 0, count = 0;
};
Share batch_share(int64_t count, int batch, int part, int parts);

// N - 1 persistent threads: run(f) calls f(i) for i in 0..N-1 concurrently, f(0) on the calling
// thread, and returns when every call has, rethrowing the first failure (lowest i) after all have
// finished. No allocation per call.
class WorkerGroup {
 public:
  explicit WorkerGroup(int parts);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;
  int size() const { return parts_; }

  template <typename F>
  void run(F& f) {
    dispatch(&f, [](void* ctx, int i) { (*static_cast<F*>(ctx))(i); });
  }

 private:
  using Call = void (*)(void*, int);
  void dispatch(void* ctx, Call call);
  void worker(int index);

  int parts_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;  // bumped per run(); a worker runs once per generation
  int pending_ = 0;
  bool stop_ = false;
  void* ctx_ = nullptr;
  Call call_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

class MultiDeviceExecutable final : public Executable {
 public:
  // `parts`: at least one, same graph and max_batch (checked), each already bound to its device.
  explicit MultiDeviceExecutable(std::vector<std::unique_ptr<Executable>> parts, std::vector<std::string> labels = {});
  ~MultiDeviceExecutable() override;

  int parts() const { return int(parts_.size()); }
  Executable& part(int i) { return *parts_.at(size_t(i)); }
  // Host milliseconds of each part's share in the last run_batches (0 for a part with none).
  double last_part_ms(int i) const { return part_ms_.at(size_t(i)); }

  int max_batch() const override { return parts_[0]->max_batch(); }
  // One batch is not split (that would change the batch size, and on cuDNN possibly the bits): it
  // runs whole on the first part.
  void run(const void* input, int n, std::span<float* const> outputs) override;
  void run_batches(const BatchStream& s) override;
  // Batches run side by side on the parts even where one part alone would not overlap them.
  bool overlaps_batches() const override { return parts_.size() > 1 || parts_[0]->overlaps_batches(); }
  // Element-wise maximum over the parts of the last run_batches (the slowest device's times).
  std::optional<RunTimings> last_timings() const override;
  std::string plan_summary() const override;
  std::string execution_path() const override;
  bool pin_host_input(const void* data, size_t bytes) override;
  std::optional<std::string> use_graph_replay(bool on) override;
  // Waits for the work enqueued on every part that has staged execution (engine bench).
  void synchronize();

 private:
  std::vector<std::unique_ptr<Executable>> parts_;
  std::vector<std::string> labels_;  // "GPU 1", for summaries
  std::vector<std::vector<float*>> part_outputs_;  // per part: its share's output pointers (reused)
  std::vector<double> part_ms_;
  std::vector<uint8_t> ran_;  // not vector<bool>: parts set their own flag from their own threads
  std::unique_ptr<WorkerGroup> workers_;
};

}  // namespace engine
