#include "formats/strict_json.hpp"

#include <cstdio>
#include <set>
#include <vector>

#include "formats/error.hpp"

namespace formats {

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0, min_code = 0;
    if ((c & 0xE0) == 0xC0) {
      length = 2, code = c & 0x1F, min_code = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, code = c & 0x0F, min_code = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, code = c & 0x07, min_code = 0x10000;
    } else {
      return i;  // a continuation byte without a lead, or 0xF8..0xFF
    }
    if (n - i < length) return i;
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += length;
  }
  return std::nullopt;
}

namespace {

// nlohmann prefixes what() with "[json.exception.parse_error.101] ", which means nothing to a user.
std::string without_exception_id(const std::string& message) {
  if (!message.empty() && message[0] == '[') {
    const size_t end = message.find("] ");
    if (end != std::string::npos) return message.substr(end + 2);
  }
  return message;
}

struct Frame {
  bool is_object = false;
  std::set<std::string> keys;
  std::string last_key;
};

}  // namespace

nlohmann::ordered_json parse_strict_json(std::string_view text, const std::string& file,
                                         const std::string& what) {
  if (const std::optional<size_t> bad = find_invalid_utf8(text)) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[*bad]));
    throw FormatError(file, what + " is not valid UTF-8 (byte " + byte + " at offset " +
                                std::to_string(*bad) + ")");
  }

  // nlohmann stops at a NUL byte as if the text ended there, which would let anything after it
  // through unread; JSON text never contains one.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw FormatError(file, what + " is not valid JSON: it contains a NUL byte at offset " +
                                std::to_string(nul));
  }

  std::vector<Frame> frames;
  using Event = nlohmann::ordered_json::parse_event_t;
  auto callback = [&](int depth, Event event, nlohmann::ordered_json& parsed) -> bool {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= kMaxJsonDepth) {
          throw FormatError(file, what + " nests objects/arrays more than " +
                                      std::to_string(kMaxJsonDepth) + " levels deep");
        }
        frames.push_back(Frame{event == Event::object_start, {}, {}});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Event::key:
        if (!frames.empty() && parsed.is_string()) {
          Frame& frame = frames.back();
          std::string key = parsed.get<std::string>();
          if (frame.keys.size() >= kMaxJsonObjectKeys) {
            throw FormatError(file, what + " has an object with more than " +
                                        std::to_string(kMaxJsonObjectKeys) + " keys");
          }
          if (!frame.keys.insert(key).second) {
            std::string inside;
            for (auto it = frames.rbegin() + 1; it != frames.rend(); ++it) {
              if (it->is_object) {
                inside = " (inside '" + it->last_key + "')";
                break;
              }
            }
            throw FormatError(file, what + " has the key '" + key + "' twice" + inside);
          }
          frame.last_key = std::move(key);
        }
        break;
      case Event::value:
        break;
    }
    return true;
  };

  try {
    return nlohmann::ordered_json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(file, what + " is not valid JSON: " + without_exception_id(e.what()));
  }
}

}  // namespace formats
