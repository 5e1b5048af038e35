#include "formats/image.hpp"

#include <png.h>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/idx.hpp"

namespace formats {
namespace {

bool starts_with(std::span<const uint8_t> bytes, std::initializer_list<uint8_t> prefix) {
  if (bytes.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), bytes.begin());
}

// A PNG whose signature's line-ending bytes were mangled (e.g. by a text-mode transfer) goes to
// libpng, which names the problem, rather than being "not a recognised data file".
bool looks_like_png(std::span<const uint8_t> b) { return starts_with(b, {0x89, 'P', 'N', 'G'}); }
bool is_jpeg(std::span<const uint8_t> b) { return starts_with(b, {0xFF, 0xD8, 0xFF}); }
bool is_pgm(std::span<const uint8_t> b) {
  return b.size() >= 2 && b[0] == 'P' && (b[1] == '2' || b[1] == '5');
}
bool is_other_netpbm(std::span<const uint8_t> b) {
  return b.size() >= 2 && b[0] == 'P' && (b[1] == '1' || b[1] == '3' || b[1] == '4' || b[1] == '6');
}

std::string first_bytes(std::span<const uint8_t> bytes) {
  std::string text;
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", bytes[i]);
    text += (i ? " " : "") + std::string(hex);
  }
  return text.empty() ? "nothing (the file is empty)" : "bytes " + text;
}

void check_size(int64_t width, int64_t height, const std::string& source, const char* kind) {
  if (width < 1 || height < 1 || width > kMaxImageSide || height > kMaxImageSide) {
    throw FormatError(source, std::string(kind) + " image is " + std::to_string(width) + "×" +
                                  std::to_string(height) + " pixels; width and height must be " +
                                  "between 1 and " + std::to_string(kMaxImageSide));
  }
}

ImageBatch gray_batch(const std::string& source, int width, int height) {
  ImageBatch batch;
  batch.source = source;
  batch.count = 1;
  batch.channels = 1;
  batch.height = height;
  batch.width = width;
  batch.pixels.assign(static_cast<size_t>(width) * static_cast<size_t>(height), 0);
  return batch;
}

// libjpeg reports fatal errors through error_exit, which must not return; the decoder below
// longjmps back. Its warnings (corrupt or truncated data, which libjpeg would paper over with
// gray pixels) are kept and turned into an error too, and nothing is printed to stderr.
struct JpegErrors {
  jpeg_error_mgr base;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  char warning[JMSG_LENGTH_MAX];
};

extern "C" void jpeg_fatal(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

extern "C" void jpeg_note(j_common_ptr info, int level) {
  if (level >= 0) return;  // trace messages
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  if (info->err->num_warnings++ == 0) (*info->err->format_message)(info, errors->warning);
}

extern "C" void jpeg_silent(j_common_ptr) {}

// A progressive JPEG is decoded scan by scan over the whole image, and a scan may be a few bytes:
// a 100 KB file of 1000 scans of a 4096×4096 image costs half a minute, a bigger one hours. The
// progress monitor stops a file whose scans × 8×8 blocks exceed kMaxJpegBlockScans (about ten
// seconds of work; a 16384×16384 grayscale image may still have 23 scans, ordinary progressive
// files have 6 to 10) or whose scans exceed kMaxJpegScans (formats/README.md, limits).
constexpr int kMaxJpegScans = 1000;
constexpr double kMaxJpegBlockScans = 1e8;

struct JpegProgress {
  jpeg_progress_mgr base;
  double blocks = 0;  // 8×8 blocks of every component, one scan over the whole image
};

extern "C" void jpeg_check_scans(j_common_ptr common) {
  const auto* info = reinterpret_cast<j_decompress_ptr>(common);
  const auto* progress = reinterpret_cast<const JpegProgress*>(common->progress);
  const int scans = info->input_scan_number;
  if (scans > kMaxJpegScans || scans * progress->blocks > kMaxJpegBlockScans) {
    auto* errors = reinterpret_cast<JpegErrors*>(common->err);
    std::snprintf(errors->message, sizeof errors->message,
                  "JPEG has too many scans for its size (%d scans of %u×%u pixels so far; at most %d scans "
                  "and %.0f million scanned 8×8 blocks)",
                  scans, info->image_width, info->image_height, kMaxJpegScans, kMaxJpegBlockScans / 1e6);
    std::longjmp(errors->jump, 1);
  }
}

// Only trivially destructible objects live in this frame, so longjmp skips no destructor.
// Returns malloc'ed pixels, or nullptr with `error` set.
uint8_t* decode_jpeg_gray(const uint8_t* data, size_t size, int* width, int* height,
                          char* error, size_t error_size) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  uint8_t* volatile pixels = nullptr;
  info.err = jpeg_std_error(&errors.base);
  errors.base.error_exit = jpeg_fatal;
  errors.base.emit_message = jpeg_note;
  errors.base.output_message = jpeg_silent;
  errors.message[0] = errors.warning[0] = '\0';
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    std::free(pixels);
    std::snprintf(error, error_size, "%s", errors.message);
    return nullptr;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  if (info.image_width < 1 || info.image_height < 1 ||
      info.image_width > static_cast<JDIMENSION>(kMaxImageSide) ||
      info.image_height > static_cast<JDIMENSION>(kMaxImageSide)) {
    std::snprintf(error, error_size, "JPEG image is %u×%u pixels; width and height must be between 1 and %d",
                  info.image_width, info.image_height, kMaxImageSide);
    jpeg_destroy_decompress(&info);
    return nullptr;
  }
  JpegProgress progress;
  progress.base.progress_monitor = jpeg_check_scans;
  for (int c = 0; c < info.num_components; ++c) {
    progress.blocks += double(info.comp_info[c].width_in_blocks) * double(info.comp_info[c].height_in_blocks);
  }
  info.progress = &progress.base;
  info.out_color_space = JCS_GRAYSCALE;
  jpeg_start_decompress(&info);
  const size_t w = info.output_width, h = info.output_height;
  pixels = static_cast<uint8_t*>(std::malloc(w * h));
  if (!pixels) {
    std::snprintf(error, error_size, "out of memory for a %zu×%zu image", w, h);
    jpeg_destroy_decompress(&info);
    return nullptr;
  }
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = pixels + static_cast<size_t>(info.output_scanline) * w;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  const long warnings = errors.base.num_warnings;
  jpeg_destroy_decompress(&info);
  if (warnings > 0) {
    std::snprintf(error, error_size, "JPEG data are corrupt or truncated: %s", errors.warning);
    std::free(pixels);
    return nullptr;
  }
  *width = static_cast<int>(w);
  *height = static_cast<int>(h);
  return pixels;
}

}  // namespace

ImageBatch decode_png(std::span<const uint8_t> bytes, const std::string& source) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  // The simplified API catches libpng's longjmp errors itself and reports them in image.message.
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    const std::string message = image.message;
    png_image_free(&image);
    throw FormatError(source, "cannot decode PNG: " + message);
  }
  if (image.width > static_cast<png_uint_32>(kMaxImageSide) ||
      image.height > static_cast<png_uint_32>(kMaxImageSide)) {
    png_image_free(&image);
    check_size(image.width, image.height, source, "PNG");
  }
  image.format = PNG_FORMAT_GRAY;
  ImageBatch batch = gray_batch(source, static_cast<int>(image.width), static_cast<int>(image.height));
  // Zeroed buffer + null background: transparent pixels are composited onto black.
  if (!png_image_finish_read(&image, nullptr, batch.pixels.data(), 0, nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    throw FormatError(source, "cannot decode PNG: " + message);
  }
  return batch;
}

ImageBatch decode_jpeg(std::span<const uint8_t> bytes, const std::string& source) {
  char error[JMSG_LENGTH_MAX + 64] = {};
  int width = 0, height = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(
      decode_jpeg_gray(bytes.data(), bytes.size(), &width, &height, error, sizeof error),
      &std::free);
  if (!pixels) throw FormatError(source, std::string("cannot decode JPEG: ") + error);
  ImageBatch batch = gray_batch(source, width, height);
  std::memcpy(batch.pixels.data(), pixels.get(), batch.pixels.size());
  return batch;
}

ImageBatch read_image_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, kMaxImageFileBytes, "image file");
  if (bytes.empty()) throw FormatError(path, "image file is empty");
  if (looks_like_png(bytes)) return decode_png(bytes, path);
  if (is_jpeg(bytes)) return decode_jpeg(bytes, path);
  if (is_pgm(bytes)) return decode_pgm(bytes, path);
  if (is_other_netpbm(bytes)) {
    throw FormatError(path, "PBM/PPM images are not supported; convert it to PGM (P2/P5) or PNG");
  }
  throw FormatError(path, "not a PNG, JPEG or PGM image (the file starts with " +
                              first_bytes(bytes) + ")");
}

ImageBatch read_images(const std::string& path) {
  // Sniff a few bytes, so that the chosen reader reads the file once, with its own size limit.
  uint8_t head[8] = {};
  size_t got = 0;
  {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::is_regular_file(status)) {
      // read_file_bytes words "not found" / "is a directory" / "not a regular file".
      read_file_bytes(path, kMaxImageFileBytes, "data file");
    }
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!file) throw FormatError(path, std::string("cannot open data file: ") + std::strerror(errno));
    got = std::fread(head, 1, sizeof head, file.get());
  }
  const std::span<const uint8_t> start(head, got);
  if (got == 0) throw FormatError(path, "data file is empty");
  if (starts_with(start, {0x1f, 0x8b}) || starts_with(start, {0x00, 0x00})) {
    return read_idx_images(path);
  }
  if (looks_like_png(start) || is_jpeg(start) || is_pgm(start) || is_other_netpbm(start)) {
    return read_image_file(path);
  }
  throw FormatError(path, "not a recognised data file: expected IDX images (raw or gzip), PNG, "
                          "JPEG or PGM, but the file starts with " + first_bytes(start));
}

}  // namespace formats
