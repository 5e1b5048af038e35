#pragma once
// Data-parallel training on several GPUs of one host: one DeviceTrainer replica per
// device, all with the same parameters. A step splits the batch into contiguous shards (replica d
// takes samples [d * n / N, (d + 1) * n / N)), each replica computes the gradients of its shard's
// loss sum divided by the whole batch's n (DeviceTrainer::shard_gradients), NCCL sums them in place
// on every device (ncclAllReduce), and every replica applies the same optimiser step to the same
// sums: the replicas stay bitwise equal. Each replica runs on its own host thread (WorkerGroup).
//
// Determinism: for a fixed device list the reduction order is fixed: NCCL's ring algorithm
// (NCCL_ALGO=Ring is set for the process unless the environment already chooses) adds the shards in
// an order set by the ring, the same every step and every run. One GPU and N GPUs differ in the last
// bits (the batch's sums are split), as in PyTorch's DistributedDataParallel.
#include <functional>
#include <memory>
#include <vector>

#include "engine/core/train.hpp"
#include "engine/gpu/train/device_trainer.hpp"

namespace engine::gpu::train {

// Whether this build has NCCL (found by CMake with the CUDA installation).
bool have_nccl();

// options.devices empty: `make(options)` on the current device; one device: on that device; several:
// one replica per device (each made with that device current) joined as above. Throws
// std::invalid_argument for a build without NCCL or an unusable device list.
std::unique_ptr<TrainExecutable> compile_on_devices(
    const TrainOptions& options, const std::function<std::unique_ptr<DeviceTrainer>(const TrainOptions&)>& make);

}  // namespace engine::gpu::train
