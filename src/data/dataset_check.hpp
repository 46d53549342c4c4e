#pragma once
// Checks that a deck's data exists before any work starts: both globs match shards with valid
// headers, and a SentencePiece vocab file is readable. Messages name the deck key and its line.

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
};

// Throws InputError naming the deck key (with its line:column) and the file.
DatasetFiles check_dataset(const config::ResolvedDeck& deck);

}  // namespace kgpt::data
