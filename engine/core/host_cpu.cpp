#include "engine/core/host_cpu.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace engine {

std::string host_cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

int64_t host_l2_cache_bytes() {
  const long from_cpuid = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (from_cpuid > 0) return from_cpuid;
  if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r")) {
    long kib = 0;
    const int got = std::fscanf(f, "%ldK", &kib);
    std::fclose(f);
    if (got == 1 && kib > 0) return int64_t(kib) * 1024;
  }
  return int64_t{512} * 1024;
}

}  // namespace engine
