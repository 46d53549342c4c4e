#pragma once
// FNV-1a over bytes, continued across calls: the parameter comparison between ranks and the
// checkpoint checksum use the same one.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kgpt {

struct Checksum {
  std::uint64_t value = 1469598103934665603ull;
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) value = (value ^ p[i]) * 1099511628211ull;
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
    return text;
  }
};

}  // namespace kgpt
