#include "engine/core/multi_device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>

namespace engine {

std::vector<int> parse_device_list(const std::string& text, int available) {
  if (available < 1) throw std::invalid_argument("--devices: no GPU is visible here");
  const std::string range = available == 1 ? "0" : fmt::format("0..{}", available - 1);
  if (text == "all") {
    std::vector<int> all(size_t(available), 0);
    for (int i = 0; i < available; ++i) all[size_t(i)] = i;
    return all;
  }
  std::vector<int> out;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty())
      throw std::invalid_argument(fmt::format("--devices '{}': an empty device index (give all, or indices like 0,1)", text));
    if (item.size() > 6 || !std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); }))
      throw std::invalid_argument(fmt::format("--devices '{}': '{}' is not a device index (give all, or indices like 0,1)",
                                              text, item));
    const int index = std::stoi(item);
    if (index >= available)
      throw std::invalid_argument(fmt::format("--devices '{}': GPU {} does not exist ({} visible here: {})", text, index,
                                              available, range));
    if (std::find(out.begin(), out.end(), index) != out.end())
      throw std::invalid_argument(fmt::format("--devices '{}': GPU {} is named twice", text, index));
    out.push_back(index);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

Share batch_share(int64_t count, int batch, int part, int parts) {
  const int64_t batches = (count + batch - 1) / batch;
  // Rounded up: part 0 always has a batch when there is one (a single batch runs there whole).
  const int64_t first = (batches * part + parts - 1) / parts, last = (batches * (part + 1) + parts - 1) / parts;
  Share s;
  s.first = std::min(count, first * batch);
  s.count = std::min(count, last * batch) - s.first;
  return s;
}

WorkerGroup::WorkerGroup(int parts) : parts_(parts), errors_(size_t(std::max(parts, 1))) {
  if (parts < 1) throw std::invalid_argument("a worker group needs at least one part");
  for (int i = 1; i < parts; ++i) threads_.emplace_back([this, i] { worker(i); });
}

WorkerGroup::~WorkerGroup() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerGroup::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    void* ctx = nullptr;
    Call call = nullptr;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ctx = ctx_;
      call = call_;
    }
    std::exception_ptr error;
    try {
      call(ctx, index);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    errors_[size_t(index)] = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

void WorkerGroup::dispatch(void* ctx, Call call) {
  if (parts_ > 1) {
    std::lock_guard lock(mutex_);
    ctx_ = ctx;
    call_ = call;
    pending_ = parts_ - 1;
    ++generation_;
  }
  if (parts_ > 1) wake_.notify_all();
  std::exception_ptr first;
  try {
    call(ctx, 0);
  } catch (...) {
    first = std::current_exception();
  }
  if (parts_ > 1) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });  // every part has finished, failed or not
    for (int i = 1; i < parts_ && !first; ++i) first = errors_[size_t(i)];
    for (auto& e : errors_) e = nullptr;
  }
  if (first) std::rethrow_exception(first);
}

MultiDeviceExecutable::MultiDeviceExecutable(std::vector<std::unique_ptr<Executable>> parts,
                                             std::vector<std::string> labels)
    : parts_(std::move(parts)), labels_(std::move(labels)) {
  if (parts_.empty()) throw std::invalid_argument("a multi-device executable needs at least one part");
  for (const auto& p : parts_) {
    if (!p) throw std::invalid_argument("a multi-device executable was given no executable");
    if (p->max_batch() != parts_[0]->max_batch())
      throw std::invalid_argument(fmt::format("multi-device parts planned for different batches ({} and {})",
                                              parts_[0]->max_batch(), p->max_batch()));
  }
  labels_.resize(parts_.size());
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i].empty()) labels_[i] = fmt::format("part {}", i);
  part_outputs_.resize(parts_.size());
  part_ms_.assign(parts_.size(), 0.0);
  ran_.assign(parts_.size(), false);
  workers_ = std::make_unique<WorkerGroup>(int(parts_.size()));
}

MultiDeviceExecutable::~MultiDeviceExecutable() {
  workers_.reset();  // the threads first: they may not touch a part being destroyed
}

void MultiDeviceExecutable::run(const void* input, int n, std::span<float* const> outputs) {
  parts_[0]->run(input, n, outputs);
  std::fill(ran_.begin(), ran_.end(), false);
  ran_[0] = true;
}

void MultiDeviceExecutable::run_batches(const BatchStream& s) {
  check_batch_stream(s, max_batch());
  const int parts = int(parts_.size());
  for (int i = 0; i < parts; ++i) {
    part_outputs_[size_t(i)].resize(s.outputs.size());  // grows on the first call only
    ran_[size_t(i)] = false;
    part_ms_[size_t(i)] = 0;
  }
  auto run_part = [&](int i) {
    const Share share = batch_share(s.count, s.batch, i, parts);
    if (share.count == 0) return;
    std::vector<float*>& outs = part_outputs_[size_t(i)];
    for (size_t k = 0; k < outs.size(); ++k) outs[k] = s.outputs[k] + share.first * s.output_elements[k];
    const auto t0 = std::chrono::steady_clock::now();
    parts_[size_t(i)]->run_batches(BatchStream{static_cast<const uint8_t*>(s.input) + size_t(share.first) * s.sample_bytes,
                                               s.sample_bytes, share.count, s.batch, outs, s.output_elements});
    part_ms_[size_t(i)] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ran_[size_t(i)] = true;
  };
  if (parts == 1) {
    run_part(0);
    return;
  }
  if (s.count <= s.batch) {  // one batch (or none): whole on the first part, no threads woken
    const auto t0 = std::chrono::steady_clock::now();
    parts_[0]->run_batches(s);
    part_ms_[0] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ran_[0] = true;
    return;
  }
  workers_->run(run_part);
}

std::optional<RunTimings> MultiDeviceExecutable::last_timings() const {
  std::optional<RunTimings> out;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (!ran_[i]) continue;
    const auto t = parts_[i]->last_timings();
    if (!t) continue;
    if (!out) out = RunTimings{};
    out->upload_ms = std::max(out->upload_ms, t->upload_ms);
    out->compute_ms = std::max(out->compute_ms, t->compute_ms);
    out->download_ms = std::max(out->download_ms, t->download_ms);
  }
  return out;
}

std::string MultiDeviceExecutable::plan_summary() const {
  if (parts_.size() == 1) return parts_[0]->plan_summary();
  std::string out = fmt::format("{} parts, each planned for batch {}; a stream is split into contiguous whole "
                                "batches, one host thread per part",
                                parts_.size(), max_batch());
  for (size_t i = 0; i < parts_.size(); ++i) out += fmt::format("\n[{}]\n{}", labels_[i], parts_[i]->plan_summary());
  return out;
}

std::string MultiDeviceExecutable::execution_path() const {
  const std::string path = parts_[0]->execution_path();
  if (parts_.size() == 1) return path;
  std::string on;
  for (const auto& l : labels_) on += (on.empty() ? "" : ", ") + l;
  return fmt::format("{}{}on {} devices ({})", path, path.empty() ? "" : ", ", parts_.size(), on);
}

bool MultiDeviceExecutable::pin_host_input(const void* data, size_t bytes) {
  bool any = false;
  for (auto& p : parts_) any = p->pin_host_input(data, bytes) || any;
  return any;
}

std::optional<std::string> MultiDeviceExecutable::use_graph_replay(bool on) {
  std::optional<std::string> why;
  for (auto& p : parts_)
    if (auto w = p->use_graph_replay(on); w && !why) why = w;
  if (why && on)
    for (auto& p : parts_) p->use_graph_replay(false);  // all or none: the parts must run alike
  return why;
}

void MultiDeviceExecutable::synchronize() {
  for (auto& p : parts_)
    if (StagedExecution* staged = p->staged_execution()) staged->synchronize();
}

}  // namespace engine
