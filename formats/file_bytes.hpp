#pragma once
// Reading a whole input file into memory with a size limit checked before any allocation, so a
// wrong path (a device, a huge file) fails with a clear message instead of exhausting memory.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace formats {

// Throws FormatError(path, ...) when the file is missing, not a regular file, larger than
// `max_bytes` or unreadable. `what` names the file's role in messages ("graph file").
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes,
                                     std::string_view what);

// "16 MiB", "100000000 bytes": limits as a user reads them.
std::string describe_size(uint64_t bytes);

// "1 byte", "3 bytes", "2 entries": counts in messages read as English.
std::string count_of(uint64_t count, std::string_view noun);

}  // namespace formats
