#pragma once
// Byte-level BPE as tiktoken does it (GPT-2's tokens and its successors'): the text is split into
// pieces by the encoding's pattern (data/split_pattern.hpp), and each piece's bytes are merged,
// lowest rank first, into tokens whose id is their rank.
//
// Vocabularies are read from tiktoken's rank files (one "base64-of-the-token's-bytes rank" a line,
// as tiktoken's load_tiktoken_bpe reads them) or from GPT-2's encoder.json with vocab.bpe beside
// it (the merges, in the printable-character spelling of bytes GPT-2 uses), which must agree.
// The encoding (its split pattern and special tokens) is named, or inferred from the file's name
// (gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base) or else from its number of ranks.
//
// A tokenizer encodes on one thread at a time (it keeps its scratch buffers between calls).
//
// Text that is not UTF-8 is read with U+FFFD for each ill-formed sequence
// (decode_utf8_replacing), as tiktoken's callers hand it such text. Special-token text
// ("<|endoftext|>") is ordinary text unless encode is told to allow special tokens.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/split_pattern.hpp"
#include "data/token_bytes.hpp"

namespace kgpt::data {

struct TiktokenEncodingSpec {
  std::string name;
  std::string pattern;
  std::vector<std::pair<std::string, int>> special_tokens;
  int ranks = 0;  // the ranks of its official rank file, for inferring the encoding
};

// gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base.
const std::vector<TiktokenEncodingSpec>& tiktoken_encodings();
std::vector<std::string> tiktoken_encoding_names();

class TiktokenTokenizer {
 public:
  // `encoding`: one of tiktoken_encodings(), or "auto" (from the file's name, else its ranks).
  // Throws InputError naming file:line for bad base64, a duplicate token or rank, a rank missing
  // below the highest (unless a special token holds it), a byte without a token of its own, or
  // encoder.json and vocab.bpe that disagree; and naming the file for anything unreadable.
  static TiktokenTokenizer load(const std::string& path, const std::string& encoding = "auto");
  ~TiktokenTokenizer();
  TiktokenTokenizer(TiktokenTokenizer&&) noexcept;
  TiktokenTokenizer& operator=(TiktokenTokenizer&&) noexcept;

  const std::string& path() const;
  const std::string& encoding() const;
  int vocab_size() const;  // the highest id (rank or special token) + 1
  int rank_count() const;
  int end_of_text() const;  // <|endoftext|>, the document separator
  bool is_special(int id) const;
  // The bytes of a token ("" for an id that is no token).
  std::string_view token_bytes(int id) const;

  // Tokens of `text`, special-token text read as ordinary text (tiktoken's encode_ordinary), or
  // with `allow_special`, each special token's text as that token (tiktoken's encode with
  // allowed_special="all").
  std::vector<int> encode(const std::string& text, bool allow_special = false) const;
  // Appends to `out`; no allocation per call once the buffers have grown.
  void encode_into(const std::string& text, bool allow_special, std::vector<int>& out) const;
  // The bytes of tokens; InputError for an id that is no token.
  std::string decode(const std::vector<int>& ids) const;

  // val_bpb's bytes per token: each token its bytes, special tokens boundaries of none.
  TokenByteTable byte_table(int vocab_size) const;

  struct Impl;  // the reader functions of tiktoken.cpp fill it

 private:
  explicit TiktokenTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Throws InputError naming the file, line and column of the first NUL byte of `text`, if any:
// NUL is not text, and in a corpus it means a binary file was given as text.
void refuse_nul_bytes(const std::string& text, const std::string& file);

}  // namespace kgpt::data
