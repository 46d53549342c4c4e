#pragma once
// Checks that a deck's data is usable before any work starts, the same checks `kgpt train` makes
// when it starts: both globs match shards with valid headers; the val shards and the first train
// shard hold only ids below model.vocab_size; the val split has at least seq_len + 1 tokens; a
// SentencePiece model or vocab file reads and fits model.vocab_size. Messages name the deck key and
// its line.

#include <cstdint>
#include <string>
#include <vector>

#include "config/deck.hpp"

namespace kgpt::data {

struct SplitFiles {
  std::vector<std::string> files;
  std::uint64_t tokens = 0;
};

struct DatasetFiles {
  SplitFiles train;
  SplitFiles val;
  std::size_t val_evaluated = 0;  // val tokens an evaluation scores (whole sequences, train.val_tokens)
};

// Throws InputError naming the deck key (with its line:column) and the file.
DatasetFiles check_dataset(const config::ResolvedDeck& deck);

// The val split as one token array, cut to whole sequences of seq_len plus the one extra target
// token (and to train.val_tokens). Throws InputError naming data.val_files when it is too short or
// a shard is bad.
std::vector<std::uint16_t> load_val_tokens(const config::ResolvedDeck& deck);

}  // namespace kgpt::data
