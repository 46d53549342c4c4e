// history.h5 as kgpt inspect reads it, then as a resumed run does: every column of /train and
// /val, rows up to the resumed step kept, the file rewritten in place and reopened for appending.
#include "fuzz_input.hpp"
#include "io/history.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".h5");
  kgpt::fuzz::expect_inspect_reads_or_refuses(path);
  kgpt::fuzz::expect_clear_refusal([&] {
    kgpt::io::RunMetadata metadata;
    metadata.deck_text = "model: {}\n";
    // The resumed step comes from the checkpoint, not the history: any row may be past it.
    const std::int64_t last_step = size > 0 ? data[size - 1] : 0;
    kgpt::io::History history = kgpt::io::History::resume(path, last_step, metadata);
    history.append(kgpt::io::ValRow{last_step, 1.0, 1.0});
  });
  return 0;
}
