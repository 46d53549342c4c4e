#pragma once
// `kgpt prepare`: text files in, byte-tokenizer train and val shards out.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kgpt::data {

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  double val_fraction = 0.1;  // share of documents that go to the val split, in [0, 1)
  // A line equal to this text ends one document and starts the next ("%" for fortune files).
  // Empty: every input file is one document.
  std::string doc_delimiter;
  std::string prefix = "text";  // shards are <prefix>_train_000000.bin, <prefix>_val_000000.bin
  std::uint64_t shard_tokens = 100000000;
  bool force = false;           // replace shards of the same prefix that are already there
  std::ostream* progress = nullptr;  // periodic progress lines, or none
};

struct PrepareSummary {
  std::uint64_t bytes_read = 0;
  std::uint64_t documents = 0;
  std::uint64_t val_documents = 0;
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
  std::string meta_file;  // <out>/<prefix>_prepare.yaml, what was made and how
};

// Throws InputError (a missing input, a bad option, shards already there without `force`)
// before anything is written.
PrepareSummary prepare_byte_shards(const PrepareOptions& options);

}  // namespace kgpt::data
