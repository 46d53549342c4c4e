// The model artifact (kgpt export; int8 or packed rows, zlib, zstd or brotli): read_artifact, then every tensor's values as eval reads them.
#include "fuzz_input.hpp"
#include "io/artifact.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".int8z");
  kgpt::fuzz::expect_clear_refusal([&] {
    const kgpt::io::Artifact artifact = kgpt::io::read_artifact(path);
    for (const auto& tensor : artifact.tensors) tensor.dequantized();
  });
  return 0;
}
