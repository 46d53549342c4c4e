// safetensors files (model.init_from): the header's JSON, offsets, shapes and dtypes.
#include "fuzz_input.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".safetensors");
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::io::read_safetensors(path); });
  return 0;
}
