// TensorBoard event files (io/event_file.hpp), as `kgpt train --resume` reads a run directory's
// before it cuts them back to its checkpoint.
#include "fuzz_input.hpp"
#include "io/event_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".tfevents");
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::io::read_event_file(path); });
  return 0;
}
