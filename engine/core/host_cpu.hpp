#pragma once
// Facts about the host processor that several parts of the engine report.
#include <cstdint>
#include <string>

namespace engine {

// The processor's marketing name from /proc/cpuinfo ("model name"), or "" where there is none
// (not Linux, or a processor that does not give one).
std::string host_cpu_model_name();

// The L2 cache of one core in bytes, as the CPU reports it (glibc reads CPUID), else sysfs; 512 KiB
// if neither answers.
int64_t host_l2_cache_bytes();

}  // namespace engine
