#include <zlib.h>

#include <algorithm>
#include <memory>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/idx.hpp"

namespace formats {
namespace {

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& input, const std::string& path,
                            uint64_t max_bytes) {
  z_stream stream{};
  // 16 + MAX_WBITS: gzip wrapper only, with its CRC and length checked by zlib.
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    throw FormatError(path, "cannot start gzip decompression (out of memory?)");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, &inflateEnd);
  stream.next_in = const_cast<Bytef*>(input.data());
  stream.avail_in = static_cast<uInt>(input.size());  // input ≤ max_bytes ≤ 1 GiB < 4 GiB

  // Grown as data arrives rather than sized from any header, so a small file that claims a huge
  // size costs nothing.
  std::vector<uint8_t> out;
  size_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() >= max_bytes) {
        throw FormatError(path, "gzip data decompress to more than " + describe_size(max_bytes) +
                                    ", the limit for a data file");
      }
      out.resize(static_cast<size_t>(
          std::min<uint64_t>(max_bytes, std::max<uint64_t>(out.size() * 2, 1 << 20))));
    }
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(out.size() - produced);
    const int status = inflate(&stream, Z_NO_FLUSH);
    produced = out.size() - stream.avail_out;
    if (status == Z_STREAM_END) {
      if (stream.avail_in == 0) break;
      // gzip allows several members back to back (e.g. `cat a.gz b.gz`).
      if (stream.avail_in >= 2 && stream.next_in[0] == 0x1f && stream.next_in[1] == 0x8b) {
        inflateReset(&stream);
        continue;
      }
      throw FormatError(path, count_of(stream.avail_in, "byte") +
                                  " of trailing garbage after the gzip data");
    }
    if (status == Z_OK) continue;
    if (status == Z_BUF_ERROR && stream.avail_out == 0) continue;  // needs more room
    if (status == Z_BUF_ERROR) {
      throw FormatError(path, "gzip data are truncated (the file ends in the middle of the "
                              "compressed stream)");
    }
    if (status == Z_MEM_ERROR) throw FormatError(path, "out of memory while decompressing");
    throw FormatError(path, std::string("gzip data are corrupt: ") +
                                (stream.msg ? stream.msg : "inflate failed"));
  }
  out.resize(produced);
  return out;
}

}  // namespace

std::vector<uint8_t> read_maybe_gzip(const std::string& path, uint64_t max_bytes,
                                     bool* was_gzip) {
  std::vector<uint8_t> bytes = read_file_bytes(path, max_bytes, "data file");
  const bool gzip = bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
  if (was_gzip) *was_gzip = gzip;
  return gzip ? gunzip(bytes, path, max_bytes) : bytes;
}

}  // namespace formats
