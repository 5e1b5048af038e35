// Fuzz target: the safetensors reader (formats::parse_safetensors on the input bytes). A file it
// accepts must be what safetensors.md promises: unique non-empty names, each tensor's bytes inside
// the file and sized by its dtype and shape, the tensors tiling the data buffer exactly.
#include <algorithm>
#include <set>
#include <string>

#include "formats/safetensors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace fuzz {

int run_safetensors(const uint8_t* data, size_t size) {
  const std::string path = "fuzz.safetensors";
  try {
    const formats::SafetensorsFile file = formats::parse_safetensors(Bytes(data, data + size), path);
    require(file.bytes.size() == size, "parse_safetensors changed the bytes");
    require(file.data_start >= 8 && file.data_start <= size, "data_start outside the file");
    std::set<std::string> names;
    uint64_t total = 0;
    for (const formats::SafetensorsTensor& tensor : file.tensors) {
      require(!tensor.name.empty() && names.insert(tensor.name).second, "bad or repeated tensor name");
      require(tensor.begin <= tensor.end && tensor.end <= size - file.data_start,
              "tensor outside the data buffer");
      require(tensor.end - tensor.begin == tensor.element_count * formats::dtype_size(tensor.dtype),
              "tensor size does not match dtype and shape");
      const std::span<const uint8_t> bytes = file.data(tensor);
      require(bytes.data() >= file.bytes.data() &&
                  bytes.data() + bytes.size() <= file.bytes.data() + file.bytes.size(),
              "tensor span outside the file");
      require(file.find(tensor.name) == &tensor, "find() does not return the tensor");
      total += tensor.end - tensor.begin;
      if (tensor.dtype == formats::DType::F32) {
        require(file.to_floats(tensor).size() == tensor.element_count, "to_floats count");
      } else {
        try {
          file.to_floats(tensor);
          require(false, "to_floats accepted a non-F32 tensor");
        } catch (const formats::FormatError& error) {
          check_error(error, path);
        }
      }
    }
    require(total == size - file.data_start, "tensors do not tile the data buffer");
  } catch (const formats::FormatError& error) {
    check_error(error, path);
  }
  return 0;
}

}  // namespace fuzz

#ifdef ENGINE_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::run_safetensors(data, size);
}
#endif
