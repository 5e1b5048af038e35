// Single image files: PNG and JPEG written here with libpng/libjpeg, PGM by hand; each decoder's
// conversions to 8-bit grayscale and its rejections.
#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

#include "formats/image.hpp"
#include "test_files.hpp"

namespace {

using formats_test::Bytes;

Bytes gradient(int width, int height, int channels) {
  Bytes pixels(static_cast<size_t>(width * height * channels));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37) % 256);
  return pixels;
}

// libpng's simplified writer; `format` is a PNG_FORMAT_* value, 16-bit data given as uint16.
Bytes png_bytes(int width, int height, png_uint_32 format, const void* pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, nullptr));
  Bytes out(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, nullptr))
      << image.message;
  out.resize(size);
  return out;
}

Bytes jpeg_bytes(int width, int height, int channels, const Bytes& pixels, int quality = 100) {
  jpeg_compress_struct info;
  jpeg_error_mgr errors;
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = channels;
  info.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) +
                   static_cast<size_t>(info.next_scanline) * width * channels;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  Bytes out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

class ImageTest : public formats_test::TempDirTest {
 protected:
  std::string write(const std::string& name, const Bytes& bytes) {
    formats_test::write_bytes(path(name), bytes);
    return path(name);
  }
  std::string write_text(const std::string& name, const std::string& text) {
    return write(name, formats_test::to_bytes(text));
  }
};

void expect_gray(const formats::ImageBatch& batch, int width, int height) {
  EXPECT_EQ(batch.count, 1);
  EXPECT_EQ(batch.channels, 1);
  EXPECT_EQ(batch.width, width);
  EXPECT_EQ(batch.height, height);
  EXPECT_EQ(batch.pixels.size(), static_cast<size_t>(width * height));
}

TEST_F(ImageTest, PngGrayReadsBackExactly) {
  const Bytes pixels = gradient(28, 20, 1);
  const std::string file = write("digit.png", png_bytes(28, 20, PNG_FORMAT_GRAY, pixels.data()));
  const formats::ImageBatch batch = formats::read_image_file(file);
  expect_gray(batch, 28, 20);
  EXPECT_EQ(batch.source, file);
  EXPECT_EQ(batch.pixels, pixels);
  EXPECT_EQ(formats::read_images(file).pixels, pixels) << "read_images recognises PNG";
}

TEST_F(ImageTest, PngColourBecomesGray) {
  // White, black, pure grey: luma is exact for these whatever the weights.
  const Bytes rgb{255, 255, 255, 0, 0, 0, 128, 128, 128};
  const std::string file = write("rgb.png", png_bytes(3, 1, PNG_FORMAT_RGB, rgb.data()));
  const formats::ImageBatch batch = formats::read_image_file(file);
  expect_gray(batch, 3, 1);
  EXPECT_EQ(batch.pixels[0], 255);
  EXPECT_EQ(batch.pixels[1], 0);
  EXPECT_NEAR(batch.pixels[2], 128, 1);
}

TEST_F(ImageTest, Png16BitBecomes8Bit) {
  const std::vector<uint16_t> wide{0, 65535, 32896};
  const std::string file = write("wide.png", png_bytes(3, 1, PNG_FORMAT_LINEAR_Y, wide.data()));
  const formats::ImageBatch batch = formats::read_image_file(file);
  expect_gray(batch, 3, 1);
  EXPECT_EQ(batch.pixels[0], 0);
  EXPECT_EQ(batch.pixels[1], 255);
}

TEST_F(ImageTest, PngTransparencyCompositedOntoBlack) {
  const Bytes gray_alpha{255, 255, 255, 0};  // opaque white, fully transparent white
  const std::string file = write("alpha.png", png_bytes(2, 1, PNG_FORMAT_GA, gray_alpha.data()));
  const formats::ImageBatch batch = formats::read_image_file(file);
  EXPECT_EQ(batch.pixels, (Bytes{255, 0}));
}

TEST_F(ImageTest, PngTruncated) {
  Bytes bytes = png_bytes(28, 28, PNG_FORMAT_GRAY, gradient(28, 28, 1).data());
  bytes.resize(bytes.size() - 20);
  const std::string file = write("trunc.png", bytes);
  EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, "cannot decode PNG");
}

TEST_F(ImageTest, PngCorruptHeader) {
  Bytes bytes = png_bytes(4, 4, PNG_FORMAT_GRAY, gradient(4, 4, 1).data());
  bytes[20] ^= 0x40;  // inside IHDR: its CRC no longer matches
  const std::string file = write("crc.png", bytes);
  EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, "cannot decode PNG");
}

TEST_F(ImageTest, PngDamagedSignature) {
  Bytes bytes = png_bytes(4, 4, PNG_FORMAT_GRAY, gradient(4, 4, 1).data());
  bytes[4] = '\n';  // "\r\n" → "\n\n", as a text-mode transfer does
  const std::string file = write("text-mode.png", bytes);
  EXPECT_FORMAT_ERROR(formats::read_images(file), file, "cannot decode PNG");
}

TEST_F(ImageTest, PngTooLarge) {
  Bytes bytes = png_bytes(1, 1, PNG_FORMAT_GRAY, Bytes{0}.data());
  // IHDR width at offset 16, big-endian; fix the chunk CRC so only the size is wrong.
  const uint32_t width = 100000;
  for (int i = 0; i < 4; ++i) bytes[16 + i] = static_cast<uint8_t>(width >> (24 - 8 * i));
  const uint32_t crc = static_cast<uint32_t>(crc32(0, bytes.data() + 12, 17));
  for (int i = 0; i < 4; ++i) bytes[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  const std::string file = write("wide.png", bytes);
  EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, "PNG image is 100000×1 pixels",
                      "between 1 and 16384");
}

TEST_F(ImageTest, JpegGrayReadsBackClosely) {
  Bytes pixels(28 * 28);
  for (int y = 0; y < 28; ++y) {
    for (int x = 0; x < 28; ++x) pixels[y * 28 + x] = static_cast<uint8_t>(x * 9);
  }
  const std::string file = write("digit.jpg", jpeg_bytes(28, 28, 1, pixels));
  const formats::ImageBatch batch = formats::read_images(file);
  expect_gray(batch, 28, 28);
  for (size_t i = 0; i < pixels.size(); ++i) ASSERT_NEAR(batch.pixels[i], pixels[i], 3) << i;
}

TEST_F(ImageTest, JpegColourBecomesGray) {
  Bytes rgb(16 * 8 * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) rgb[i] = rgb[i + 1] = rgb[i + 2] = i < rgb.size() / 2 ? 250 : 5;
  const std::string file = write("rgb.jpeg", jpeg_bytes(16, 8, 3, rgb));
  const formats::ImageBatch batch = formats::read_image_file(file);
  expect_gray(batch, 16, 8);
  EXPECT_NEAR(batch.pixels[0], 250, 3);
  EXPECT_NEAR(batch.pixels.back(), 5, 3);
}

TEST_F(ImageTest, JpegTruncated) {
  Bytes bytes = jpeg_bytes(64, 64, 1, gradient(64, 64, 1), 90);
  bytes.resize(bytes.size() / 2);
  const std::string file = write("trunc.jpg", bytes);
  EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, "cannot decode JPEG",
                      "corrupt or truncated");
}

TEST_F(ImageTest, JpegHeaderOnly) {
  const std::string file = write("header.jpg", Bytes{0xFF, 0xD8, 0xFF, 0xE0, 0x00});
  EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, "cannot decode JPEG");
}

TEST_F(ImageTest, PgmBinary) {
  Bytes bytes = formats_test::to_bytes("P5\n# a comment\n3 2\n255\n");
  const Bytes pixels{0, 50, 100, 150, 200, 255};
  bytes.insert(bytes.end(), pixels.begin(), pixels.end());
  const std::string file = write("x.pgm", bytes);
  const formats::ImageBatch batch = formats::read_images(file);
  expect_gray(batch, 3, 2);
  EXPECT_EQ(batch.pixels, pixels);
}

TEST_F(ImageTest, PgmBinaryRasterMayStartWithWhitespaceByte) {
  // The single separator after maxval is the header's end; a following 0x0A is a pixel.
  Bytes bytes = formats_test::to_bytes("P5 2 1 255\n\n\x20");
  EXPECT_EQ(formats::read_image_file(write("ws.pgm", bytes)).pixels, (Bytes{10, 32}));
}

TEST_F(ImageTest, PgmBinary16BitAndOtherMaxval) {
  Bytes wide = formats_test::to_bytes("P5 2 1 65535\n");
  for (uint8_t b : {0x00, 0x00, 0xFF, 0xFF}) wide.push_back(b);
  EXPECT_EQ(formats::read_image_file(write("wide.pgm", wide)).pixels, (Bytes{0, 255}));
  Bytes low = formats_test::to_bytes("P5 3 1 15\n");
  for (uint8_t b : {0, 8, 15}) low.push_back(b);
  EXPECT_EQ(formats::read_image_file(write("low.pgm", low)).pixels, (Bytes{0, 136, 255}));
}

TEST_F(ImageTest, PgmPlain) {
  const std::string file = write_text("p2.pgm", "P2\n# made by hand\n2 2\n10\n0 5\n10\n7\n");
  const formats::ImageBatch batch = formats::read_images(file);
  expect_gray(batch, 2, 2);
  EXPECT_EQ(batch.pixels, (Bytes{0, 128, 255, 179}));
}

TEST_F(ImageTest, PgmErrors) {
  const std::pair<std::string, std::string> cases[] = {
      {"P5\n3 2\n255\n\x01\x02", "PGM raster is truncated: 2 of 6 bytes for 3×2 pixels"},
      {"P5\n1 1\n255\n\x01\x02", "1 unexpected byte after the PGM image data"},
      {"P5\n1 1\n255", "expected one whitespace byte after the maximum value"},
      {"P5\n0 1\n255\n", "PGM image is 0×1 pixels"},
      {"P5\n20000 1\n255\n", "PGM image is 20000×1 pixels; width and height must be between 1 and 16384"},
      {"P5\n1 1\n0\n\x00", "PGM maximum value is 0; it must be 1 to 65535"},
      {"P5\n1 1\n70000\n", "PGM maximum value is 70000"},
      {"P5\n1 x\n255\n", "PGM: expected a number for the height, got 'x'"},
      {"P5\n1", "PGM file ends before the height"},
      {"P51 1 255\n\x00", "PGM header: expected whitespace before the width"},
      {"P5\n99999999999 1\n255\n", "PGM: the width is too large"},
      {"P2\n2 1\n10\n3 11\n", "PGM sample 11 exceeds the maximum value 10"},
      {"P2\n2 2\n10\n3 4 5\n", "PGM data end after 3 of 4 samples"},
      {"P2\n1 1\n10\n3 4\n", "unexpected data after the 1 PGM sample"},
      {"P2\n2 1\n10\n3 -4\n", "PGM: expected a number for the sample, got '-'"},
  };
  int i = 0;
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(message);
    const std::string file = write("bad" + std::to_string(i++) + ".pgm", formats_test::to_bytes(text));
    EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, message);
  }
}

TEST_F(ImageTest, OtherNetpbmAndNonImages) {
  const std::string ppm = write_text("x.ppm", "P6\n1 1\n255\nabc");
  EXPECT_FORMAT_ERROR(formats::read_images(ppm), ppm, "PBM/PPM images are not supported");
  const std::string text = write_text("x.png", "hello");
  EXPECT_FORMAT_ERROR(formats::read_image_file(text), text,
                      "not a PNG, JPEG or PGM image (the file starts with bytes 68 65 6c 6c)");
  const std::string empty = write("empty.pgm", {});
  EXPECT_FORMAT_ERROR(formats::read_image_file(empty), empty, "image file is empty");
}

TEST_F(ImageTest, ImageFileSizeLimit) {
  Bytes bytes = formats_test::to_bytes("P5 1 1 255\n");
  bytes.resize(formats::kMaxImageFileBytes + 1, 0);
  const std::string file = write("big.pgm", bytes);
  EXPECT_FORMAT_ERROR(formats::read_image_file(file), file, "image file is 67108865 bytes, more than the limit of 64 MiB");
}

}  // namespace
