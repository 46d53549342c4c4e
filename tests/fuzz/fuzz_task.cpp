// Multiple-choice task files (kgpt eval --task, data.task_files): JSON Lines in HellaSwag's format.
#include "data/task_file.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".jsonl");
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::data::read_task_file(path); });
  return 0;
}
