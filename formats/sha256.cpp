#include "formats/sha256.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "formats/error.hpp"

namespace formats {
namespace {

struct DigestContext {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};

  DigestContext() {
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("OpenSSL: cannot initialise SHA-256");
    }
  }
  void update(const void* data, size_t size) {
    if (size > 0 && EVP_DigestUpdate(ctx.get(), data, size) != 1) {
      throw std::runtime_error("OpenSSL: SHA-256 update failed");
    }
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) {
      throw std::runtime_error("OpenSSL: SHA-256 final failed");
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string text;
    text.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) {
      text += kHex[digest[i] >> 4];
      text += kHex[digest[i] & 0xF];
    }
    return text;
  }
};

}  // namespace

std::string sha256_hex(std::span<const uint8_t> bytes) {
  DigestContext digest;
  digest.update(bytes.data(), bytes.size());
  return digest.hex();
}

std::string sha256_file_hex(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw FormatError(path, std::string("cannot open file: ") + std::strerror(errno));
  DigestContext digest;
  std::vector<unsigned char> buffer(1 << 20);
  size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    digest.update(buffer.data(), got);
  }
  if (std::ferror(file.get())) throw FormatError(path, "cannot read file");
  return digest.hex();
}

}  // namespace formats
