// Token shards (kgpt prepare, parameter-golf's format): the header, then the tokens under a vocabulary.
#include "data/shard.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".bin");
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::data::read_shard_header(path); });
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::data::read_shard(path, 1024); });
  return 0;
}
