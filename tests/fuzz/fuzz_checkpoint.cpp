// HDF5 checkpoints as kgpt inspect reads them, then as kgpt eval, sample and export do: the
// resolved deck stored in the file, then the model that deck describes, loaded with
// load_checkpoint's checks (tensor count, names, shapes, types, state and checksum).
#include "core/kokkos_compat.hpp"
#include "fuzz_input.hpp"
#include "inference/from_checkpoint.hpp"
#include "model/memory.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static const kgpt::compat::Runtime kokkos;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = kgpt::fuzz::as_file(data, size, ".h5");
  kgpt::fuzz::expect_inspect_reads_or_refuses(path);
  kgpt::fuzz::expect_clear_refusal([&] {
    const kgpt::config::ResolvedDeck deck = kgpt::inference::checkpoint_deck(path, {}, 1);
    // The stored deck may describe any model, and kgpt would build it; the reader is what is fuzzed
    // here, so a model whose parameters, optimizer state and activations pass 256 MB is left unbuilt.
    const auto memory = kgpt::model::model_memory(deck.config.model, 1, deck.config.train.seq_len, kgpt::model::this_build());
    if (memory.parameters * 4 + memory.activations > (std::size_t{256} << 20)) return;
    std::int64_t step = 0;
    kgpt::inference::checkpoint_parameters(deck, path, step);
  });
  return 0;
}
