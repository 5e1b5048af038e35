#pragma once
// JSON parsing for untrusted files: UTF-8 checked first (so the message says "not valid UTF-8"
// rather than a parser internal), duplicate keys rejected (nlohmann keeps the last one silently,
// which would let a typo or a tampered header through), nesting depth bounded.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace formats {

inline constexpr int kMaxJsonDepth = 64;
// Keys in one JSON object. The parser keeps keys in file order (ordered_json), so each insertion
// scans the keys before it: without a bound, a header of a million keys takes hours. Bounds the
// safetensors header's tensor count too (formats/safetensors.md).
inline constexpr size_t kMaxJsonObjectKeys = 4096;

// Offset of the first byte that does not belong to a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed), or nullopt when all of it is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// Parses `text`; any problem becomes FormatError(file, what + " ..."), e.g. what = "graph file".
// Object keys keep their file order.
nlohmann::ordered_json parse_strict_json(std::string_view text, const std::string& file,
                                         const std::string& what);

}  // namespace formats
