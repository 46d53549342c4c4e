// kgpt's FP8 rounding (core/fp8.hpp) of a file of little-endian float32 values, for the test that
// compares it with an independent numpy implementation (test_fp8_rounding.py).
//   fp8_round_dump IN OUT_E4M3 OUT_E5M2
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/fp8.hpp"

namespace {

template <kgpt::Fp8Format F>
bool write_rounded(const std::vector<float>& in, const char* path) {
  std::vector<float> out;
  out.reserve(in.size());
  for (float v : in) out.push_back(kgpt::fp8_round<F>(v));
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  return static_cast<bool>(file);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fp8_round_dump IN OUT_E4M3 OUT_E5M2\n");
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.eof() && file.fail()) {
    std::fprintf(stderr, "fp8_round_dump: cannot read %s\n", argv[1]);
    return 2;
  }
  std::vector<float> in(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(in.size() * sizeof(float)),
            reinterpret_cast<char*>(in.data()));
  if (!write_rounded<kgpt::Fp8Format::e4m3>(in, argv[2]) || !write_rounded<kgpt::Fp8Format::e5m2>(in, argv[3])) {
    std::fprintf(stderr, "fp8_round_dump: cannot write the results\n");
    return 2;
  }
  return 0;
}
