#pragma once
// SentencePiece models (Debian's libsentencepiece): training one from text, and encoding and
// decoding with one, the way kgpt's shards use them.
//
// Text is encoded line by line, each line exactly as `spm_encode` of the same package encodes it,
// and a line break is the byte-fallback piece <0x0A>; a document is the BOS token followed by its
// lines. Models trained by `kgpt tokenizer train` keep text as it is (no normalisation, no dummy
// prefix, no whitespace folding), so decoding gives back the UTF-8 text that was encoded.
// SentencePiece reads each byte that is not UTF-8 as U+FFFD, so such bytes become U+FFFD.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "data/token_bytes.hpp"

namespace kgpt::data {

class SentencePieceModel {
 public:
  // Throws InputError naming the file when it cannot be read or is not a SentencePiece model.
  static SentencePieceModel load(const std::string& path);
  ~SentencePieceModel();
  SentencePieceModel(SentencePieceModel&&) noexcept;
  SentencePieceModel& operator=(SentencePieceModel&&) noexcept;

  const std::string& path() const { return path_; }
  int vocab_size() const;
  int bos_id() const;  // the document start (-1 when the model has none)
  int eos_id() const;
  int newline_id() const;  // the byte piece <0x0A> (-1 without byte fallback)
  bool is_boundary(int id) const;  // control, unknown or unused pieces: they stand for no text
  std::string piece(int id) const;
  int byte_value(int id) const;  // the byte a byte-fallback piece <0xNN> stands for, or -1

  // One line (without its line break), as spm_encode encodes it.
  std::vector<int> encode_line(const std::string& line) const;
  // Text of several lines: each line encoded, <0x0A> for every line break.
  std::vector<int> encode_text(const std::string& text) const;
  // The text of tokens (SentencePiece's decoding); boundary tokens stand for nothing.
  std::string decode(const std::vector<int>& ids) const;

  // Bytes per token for val_bpb, by the rules of data/token_bytes.hpp, for ids below vocab_size.
  TokenByteTable byte_table(int vocab_size) const;

 private:
  struct Impl;
  SentencePieceModel(std::string path, std::unique_ptr<Impl> impl);
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

// True when `path` names a SentencePiece model (.model) rather than its text vocabulary (.vocab).
bool is_model_file(const std::string& path);

// data.vocab_file's bytes per token: from a .model (SentencePieceModel::byte_table) or a .vocab
// (load_sentencepiece_vocab), which give the same table for the same model. Throws InputError when
// the file holds more pieces than vocab_size.
TokenByteTable load_sentencepiece_table(const std::string& path, int vocab_size);

enum class SentencePieceType { bpe, unigram };

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;
  int vocab_size = 1024;
  std::string out_prefix;  // writes <prefix>.model and <prefix>.vocab
  SentencePieceType type = SentencePieceType::bpe;
  // A line equal to this text separates documents and is not trained on (fortune files use "%").
  std::string doc_delimiter;
  int threads = 1;
  std::ostream* progress = nullptr;  // kgpt's progress lines and SentencePiece's own log, or none
};

struct TokenizerTrainSummary {
  std::uint64_t lines = 0, bytes = 0;
  int pieces = 0;
  std::string model_file, vocab_file;
  double seconds = 0;
};

// Trains a model with byte fallback (every byte can be encoded) and the special pieces
// <pad> = 0, <s> = 1 (document start), </s> = 2, <unk> = 3, as parameter-golf's tokenizers
// number them. Throws InputError for bad options, unreadable inputs, or data SentencePiece
// cannot train on (its message included); nothing is written then.
TokenizerTrainSummary train_sentencepiece(const TokenizerTrainOptions& options);

}  // namespace kgpt::data
