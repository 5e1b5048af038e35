#pragma once
// Files the CLI writes. Each is written to PATH.tmp and renamed over PATH only when complete, so
// an error never leaves a half-written file under the name the user asked for.
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <string>

namespace engine::cli {

// Throws std::invalid_argument naming `option` and `path` when the file could not be written there
// (a folder of that name, a folder that does not exist or is not writable): found before any work.
void check_output_path(const std::string& option, const std::string& path);

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// A float32 .npy array of shape [rows, cols] (NumPy format 1.0, C order).
void write_npy_f32(const std::string& path, std::span<const float> values, int64_t rows, int64_t cols);

}  // namespace engine::cli
