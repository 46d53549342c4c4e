// Sweep files (kgpt sweep): the grid or list of overrides over a base deck. The base deck named in
// the input is read relative to the folder the fuzzer runs in (tests/fuzz/run from scripts/fuzz.sh).
#include "config/sweep.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".sweep.yaml");
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::config::expand_sweep(path, "/tmp/kgpt_fuzz_sweep_runs", 1); });
  return 0;
}
