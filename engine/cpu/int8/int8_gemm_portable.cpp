// The portable int8 product: plain loops over the unpacked weights (int8_gemm.hpp).
#include <cstring>

#include "engine/cpu/int8/int8_gemm.hpp"
#include "engine/cpu/int8/int8_ops.hpp"

namespace engine::cpu::int8 {
namespace {

size_t packed_bytes(int n, int kp) { return size_t(n) * size_t(kp); }

void pack(const int8_t* w, int n, int kp, uint8_t* out) { std::memcpy(out, w, size_t(n) * size_t(kp)); }

void gemm(const uint8_t* a, int m, int kp, const uint8_t* packed, int n, int32_t* c, int ldc) {
  const auto* w = reinterpret_cast<const int8_t*>(packed);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int32_t sum = 0;
      for (int k = 0; k < kp; ++k) sum += int32_t(a[size_t(i) * kp + k]) * int32_t(w[size_t(j) * kp + k]);
      c[size_t(i) * ldc + j] = sum;
    }
}

}  // namespace

const Int8Gemm& int8_gemm_portable() {
  static const Int8Gemm set{"portable", packed_bytes, pack, gemm, quantize, requantize_rows};
  return set;
}

}  // namespace engine::cpu::int8
