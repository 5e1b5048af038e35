#include "formats/file_bytes.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "formats/error.hpp"

namespace formats {

std::string describe_size(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
}

std::string count_of(uint64_t count, std::string_view noun) {
  std::string text = std::to_string(count) + " " + std::string(noun);
  if (count == 1) return text;
  if (noun.ends_with("y")) return text.substr(0, text.size() - 1) + "ies";
  return text + "s";
}

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes,
                                     std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw FormatError(path, std::string(what) + " not found" +
                                (ec && ec != std::errc::no_such_file_or_directory
                                     ? " (" + ec.message() + ")"
                                     : ""));
  }
  if (fs::is_directory(status)) throw FormatError(path, std::string(what) + " is a directory");
  if (!fs::is_regular_file(status)) {
    throw FormatError(path, std::string(what) + " is not a regular file");
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw FormatError(path, "cannot read " + std::string(what) + ": " + ec.message());
  if (size > max_bytes) {
    throw FormatError(path, std::string(what) + " is " + std::to_string(size) +
                                " bytes, more than the limit of " + describe_size(max_bytes));
  }

  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    throw FormatError(path, "cannot open " + std::string(what) + ": " + std::strerror(errno));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  const size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), file.get());
  if (got != bytes.size() || std::ferror(file.get())) {
    throw FormatError(path, "cannot read " + std::string(what) + " (got " + std::to_string(got) +
                                " of " + std::to_string(bytes.size()) + " bytes)");
  }
  // A file that grew after the size check would otherwise be silently truncated.
  if (std::fgetc(file.get()) != EOF) {
    throw FormatError(path, std::string(what) + " changed size while being read");
  }
  return bytes;
}

}  // namespace formats
