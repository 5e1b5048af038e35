#pragma once
// Facts about the host processor that several parts of the engine report.
#include <string>

namespace engine {

// The processor's marketing name from /proc/cpuinfo ("model name"), or "" where there is none
// (not Linux, or a processor that does not give one).
std::string host_cpu_model_name();

}  // namespace engine
