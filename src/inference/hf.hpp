#pragma once
// Models in and out of the Hugging Face ecosystem: `kgpt export --format hf` writes a checkpoint as
// the folder transformers loads (config.json, model.safetensors, and tokenizer.model for a
// SentencePiece deck), and `model.init_from` starts a run from such weights. The family says how
// transformers holds its models (model::HfForm): names, Conv1D weights stored transposed, a prefix
// some files leave out, buffers to skip.

#include <cstdint>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "io/safetensors.hpp"

namespace kgpt::inference {

struct HfExportSummary {
  std::int64_t step = 0;
  std::size_t tensors = 0;
  std::size_t bytes = 0;               // model.safetensors
  std::vector<std::string> files;      // the folder's files, as written
};

// Writes the folder `out` (which must not exist: it is made under a temporary name and renamed into
// place). A family without a transformers class, or a deck whose model differs from that class
// (model.logit_softcap), is an InputError naming the checkpoint and the key; nothing is written.
HfExportSummary export_hf(const std::string& checkpoint, const std::string& out, io::SafetensorsDtype dtype,
                          config::Weights weights = config::Weights::live);

struct InitWeights {
  std::string file;      // the safetensors file read (model.init_from, or its model.safetensors)
  std::string checksum;  // FNV-1a 64 of the file's bytes, hex
  std::size_t tensors = 0;
  std::vector<float> values;  // in the deck's parameter layout (padding zero)
  // Position tables the file has more rows of than the deck's train.seq_len, of which the first
  // rows were loaded: "transformer.wpe.weight 1024->256".
  std::vector<std::string> cropped;
};

// Reads model.init_from and checks every tensor of the deck's model against it: a missing tensor,
// a shape that differs, or a tensor the model does not have is an InputError naming the file and
// the tensor (with both shapes). A learned position table with more positions than
// train.seq_len loads its first train.seq_len rows (said in `cropped`); one with fewer is refused.
// Values of F16 and BF16 files are widened to float.
InitWeights read_init_weights(const config::ResolvedDeck& deck);

}  // namespace kgpt::inference
