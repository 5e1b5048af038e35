#pragma once
// One exception type for every problem found in an input file. The message always starts with the
// file's path, so the CLI can print it as-is: "models/x.json: node 'c1': weight has shape ...".
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace formats {

// Messages quote names and text taken from the file (keys, tensor names, parser context), which
// may hold control characters, NUL or broken UTF-8; those bytes are shown as \xNN so that the
// message prints as one readable line and is never cut short at a NUL.
inline std::string printable_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t length = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = length > 0 && n - i >= length && c >= 0x20 && c != 0x7F;
    if (ok && length > 1) {
      uint32_t code = c & (0x7F >> length);
      for (size_t k = 1; k < length && ok; ++k) {
        ok = (s[i + k] & 0xC0) == 0x80;
        code = (code << 6) | (s[i + k] & 0x3F);
      }
      const uint32_t min_code = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
      ok = ok && code >= min_code && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
    }
    if (ok) {
      out.append(text, i, length);
      i += length;
    } else {
      static const char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
  return out;
}

class FormatError : public std::runtime_error {
 public:
  FormatError(const std::string& file, const std::string& problem)
      : std::runtime_error(printable_text(file) + ": " + printable_text(problem)),
        file_(file),
        problem_(printable_text(problem)) {}
  const std::string& file() const { return file_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::string problem_;
};

}  // namespace formats
