#include "engine/cli/output_files.hpp"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <unistd.h>

namespace engine::cli {

void check_output_path(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::invalid_argument(option + " " + path + ": is a folder, not a file name");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw std::invalid_argument(option + " " + path + ": the folder " + parent.string() + " does not exist");
  if (::access(parent.c_str(), W_OK) != 0)
    throw std::invalid_argument(option + " " + path + ": the folder " + parent.string() + " is not writable: " +
                                std::strerror(errno));
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  auto discard = [&] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path + ": cannot write (through " + tmp + "): " + std::strerror(errno));
    try {
      write(out);
    } catch (...) {
      out.close();
      discard();
      throw;
    }
    out.close();
    if (!out) {
      discard();
      throw std::runtime_error(path + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    discard();
    throw std::runtime_error(path + ": cannot move " + tmp + " into place: " + ec.message());
  }
}

void write_npy_f32(const std::string& path, std::span<const float> values, int64_t rows, int64_t cols) {
  if (int64_t(values.size()) != rows * cols)
    throw std::logic_error("write_npy_f32: " + std::to_string(values.size()) + " values for a [" +
                           std::to_string(rows) + ", " + std::to_string(cols) + "] array");
  // The header names the byte order, so writing the host's own needs no swapping.
  const char* descr = std::endian::native == std::endian::little ? "<f4" : ">f4";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces and a final newline to a
  // multiple of 64 bytes, as format 1.0 asks.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) throw std::runtime_error(path + ": .npy header too long");
  write_file_atomically(path, [&](std::ostream& out) {
    out.write("\x93NUMPY\x01\x00", 8);
    const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xFF),
                                  static_cast<unsigned char>(header.size() >> 8)};
    out.write(reinterpret_cast<const char*>(len), 2);
    out.write(header.data(), std::streamsize(header.size()));
    out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size_bytes()));
  });
}

}  // namespace engine::cli
