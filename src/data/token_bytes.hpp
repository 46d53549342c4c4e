#pragma once
// How many bytes of text each token stands for, so that val_bpb = (val_loss / ln 2) * tokens / bytes
// compares models with different tokenizers.
//   byte tokenizer: ids 0-255 are one byte each; 256 (the document boundary) is a boundary of 0 bytes.
//   SentencePiece (.vocab file, one "piece<TAB>score" per line, line i is id i): control and unknown
//   pieces (<unk>, <s>, </s>, <pad>) are boundaries of 0 bytes; byte-fallback pieces <0xNN> are 1
//   byte; other pieces count the UTF-8 length of the piece without its leading U+2581, plus one
//   byte for that space unless the previous token is a boundary. A U+2581 further inside a piece
//   (runs of spaces in models that keep whitespace) is one byte of text, a space.

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::data {

struct TokenByteTable {
  std::vector<std::uint8_t> base_bytes;          // by token id
  std::vector<std::uint8_t> has_leading_space;   // by token id
  std::vector<std::uint8_t> is_boundary;         // by token id
  // The token kgpt prepare places before every document (the byte tokenizer's 256, SentencePiece's
  // <s>), or -1 when the vocabulary has none.
  int document_start = -1;

  // Bytes of text that `token` adds after `previous`.
  int bytes(int previous, int token) const {
    return base_bytes[token] + (has_leading_space[token] && !is_boundary[previous] ? 1 : 0);
  }
};

TokenByteTable byte_tokenizer_table(int vocab_size);

// Bytes of text a piece stands for once its leading U+2581 is removed: its UTF-8 length, with each
// further U+2581 counted as the one space it stands for; at most 255.
std::uint8_t piece_text_bytes(const std::string& piece);

// Reads a SentencePiece .vocab file (one "piece<TAB>score" per line; a piece may itself hold a
// tab). Throws InputError naming the file and line when it cannot be read, a line has no tab, or
// it holds more pieces than vocab_size. Ids past the file's pieces count as boundaries of 0 bytes.
TokenByteTable load_sentencepiece_vocab(const std::string& path, int vocab_size);

// val_bpb from a mean loss in nats over `tokens` tokens that stand for `bytes` bytes.
double bits_per_byte(double mean_loss, double tokens, double bytes);

}  // namespace kgpt::data
