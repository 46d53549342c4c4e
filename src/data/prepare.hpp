#pragma once
// `kgpt prepare`: text files in, train and val token shards out, with the byte tokenizer, a
// SentencePiece model (data/sentencepiece.hpp) or tiktoken's BPE (data/tiktoken.hpp).

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace kgpt::data {

enum class PrepareTokenizer { byte, sentencepiece, tiktoken };

// How the val split is taken: a share of the documents, spread evenly (the first always to val);
// the last share of the text's bytes (a document cut there goes on in val); or, by default, the
// documents when the inputs are several documents and the tail when they are one (one file, no
// delimiter), which no share of documents could split.
enum class ValSplit { automatic, documents, tail };

struct PrepareOptions {
  std::vector<std::string> inputs;
  PrepareTokenizer tokenizer = PrepareTokenizer::byte;
  std::string model_file;  // the SentencePiece .model, with PrepareTokenizer::sentencepiece
  std::string vocab_file;  // the rank file or encoder.json, with PrepareTokenizer::tiktoken
  std::string encoding = "auto";  // the tiktoken encoding (data/tiktoken.hpp)
  std::string out_dir;
  double val_fraction = 0.1;  // share of the documents (or bytes) that go to the val split, in [0, 1)
  ValSplit val_split = ValSplit::automatic;
  // A line equal to this text ends one document and starts the next ("%" for fortune files).
  // Empty: every input file is one document, unless `paragraphs`.
  std::string doc_delimiter;
  bool paragraphs = false;  // blank lines separate documents (a line of nothing but spaces counts)
  std::string prefix = "text";  // shards are <prefix>_train_000000.bin, <prefix>_val_000000.bin
  std::uint64_t shard_tokens = 100000000;
  bool force = false;           // replace shards of the same prefix that are already there
  std::ostream* progress = nullptr;  // periodic progress lines, or none

  // Under MPI ranks (app/cmd_prepare.cpp fills these from parallel/): every rank reads the inputs,
  // and with tiktoken each encodes its share of the text (groups of about 256 KiB, dealt round
  // robin) and sends the tokens to rank 0, which alone writes the shards, in the order one rank
  // would. Byte and SentencePiece encoding runs on rank 0. `agree` runs a step on every rank and
  // makes its failure every rank's (parallel::agreed); by default it just runs it.
  int rank = 0, world_size = 1;
  std::function<void(const std::function<void()>&)> agree;
  std::function<void(std::vector<int>)> send_to_root;  // may return before rank 0 has taken them
  std::function<std::vector<int>(int rank)> receive_at_root;
};

struct PrepareSummary {
  std::uint64_t bytes_read = 0;
  std::uint64_t documents = 0;
  std::uint64_t val_documents = 0;  // documents that start in the val split (the tail's cut one too)
  ValSplit val_split = ValSplit::documents;  // how it was taken (never automatic)
  std::uint64_t val_bytes = 0;               // bytes of text in the val split
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
  std::string meta_file;  // <out>/<prefix>_prepare.yaml, what was made and how
};

// Every document starts with the document token (256 for bytes, the model's <s> for SentencePiece,
// <|endoftext|> for tiktoken) followed by its text: its bytes, its lines encoded as
// data/sentencepiece.hpp describes, or its whole text as tiktoken encodes it (encode_ordinary).
// With tiktoken, a NUL byte in the text is an InputError naming file:line:column.
// Throws InputError (a missing input or model, a bad option, a vocabulary that does not fit uint16,
// shards already there without `force`) before anything is written. The summary is rank 0's.
PrepareSummary prepare_shards(const PrepareOptions& options);

}  // namespace kgpt::data
