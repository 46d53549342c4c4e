#pragma once
// `kgpt prepare`: text files in, train and val token shards out, with the byte tokenizer or a
// SentencePiece model (data/sentencepiece.hpp).

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kgpt::data {

enum class PrepareTokenizer { byte, sentencepiece };

struct PrepareOptions {
  std::vector<std::string> inputs;
  PrepareTokenizer tokenizer = PrepareTokenizer::byte;
  std::string model_file;  // the SentencePiece .model, with PrepareTokenizer::sentencepiece
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

// Every document starts with the document token (256 for bytes, the model's <s> for SentencePiece)
// followed by its text: its bytes, or its lines encoded as data/sentencepiece.hpp describes.
// Throws InputError (a missing input or model, a bad option, a vocabulary that does not fit uint16,
// shards already there without `force`) before anything is written.
PrepareSummary prepare_shards(const PrepareOptions& options);

}  // namespace kgpt::data
