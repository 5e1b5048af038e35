#pragma once
// SHA-256 through OpenSSL's EVP interface (the weights file's checksum, model-format-v1.md).
#include <cstdint>
#include <span>
#include <string>

namespace formats {

// 64 lowercase hex digits.
std::string sha256_hex(std::span<const uint8_t> bytes);

// Hashes a whole file, streaming; throws FormatError(path, ...) when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace formats
