#pragma once
// engine bench --devices: one batch split across several GPUs, against the first GPU alone in the
// same call. Each device gets a contiguous share of the batch (an executable per device, planned
// for its share) and every scope is timed on the host from the start on all devices to the end on
// all (CUDA events of different devices cannot be compared), so the one-GPU baseline is re-timed
// the same way here rather than taken from the event-timed single-device cases.
//   compute    compute(share) enqueued on every device, then every device synchronised;
//   e2e        stage_input, compute, fetch_outputs on every device, then every device synchronised;
// With several devices it also runs N x batch images per iteration, a batch per device (the
// data-parallel way), against the same baseline.
//   pipelined  kStreamBatches x batch images from page-locked memory through MultiDeviceExecutable
//              ::run_batches (whole batches of the share size split across the devices, one host
//              thread per device, each overlapping its uploads with its compute).
#include <string>
#include <vector>

#include "engine/bench/common.hpp"
#include "engine/core/backend.hpp"

namespace engine::bench {

struct MultiSettings {
  double warmup_ms = 200, duration_s = 1;
  int iterations = 10, repetitions = 3;
  std::vector<double> percentiles;
  bool transfers = true;  // e2e and pipelined too (not with --no-data-transfers)
};

struct MultiScope {
  std::string scope;          // compute, e2e, pipelined
  std::vector<int> devices;   // the GPUs, by index
  std::vector<int64_t> shares;  // images per device per iteration (pipelined: per stream)
  Stats latency;              // host ms per batch of `batch` images, all devices
  double images_per_s = 0;    // batch / median latency
  std::vector<double> device_images_per_s;  // each device's share / its own median time
  double spread_pct = 0;      // sd of the repetitions' rates, % of their mean
  double scaling = 0;         // images_per_s / the first device alone's (same scope, same call)
};

struct MultiCase {
  std::string backend;
  int batch = 0;
  std::vector<MultiScope> one, all;  // the first device alone; every device
  // Every device with a whole batch of its own (N x batch images per iteration): how a data-parallel
  // user runs (a batch per GPU), where `all` splits one batch and shrinks each GPU's share.
  std::vector<MultiScope> each;
};

// Throws on a compile or run failure (the caller records it as a skip).
MultiCase bench_multi_device(Backend& backend, const Graph& graph, const CompileOptions& base,
                             const std::vector<int>& devices, int batch, const MultiSettings& settings);
void print_multi_case(const MultiCase& c);
Json multi_case_json(const MultiCase& c);

}  // namespace engine::bench
