#include "data/token_bytes.hpp"

#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "data/byte_tokenizer.hpp"

namespace kgpt::data {

namespace {

bool is_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return false;
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return hex(piece[3]) && hex(piece[4]);
}

bool is_control_piece(const std::string& piece) {
  return piece == "<unk>" || piece == "<s>" || piece == "</s>" || piece == "<pad>";
}

}  // namespace

TokenByteTable byte_tokenizer_table(int vocab_size) {
  TokenByteTable table;
  table.base_bytes.assign(vocab_size, 0);
  table.has_leading_space.assign(vocab_size, 0);
  table.is_boundary.assign(vocab_size, 1);
  for (int id = 0; id < 256 && id < vocab_size; ++id) {
    table.base_bytes[id] = 1;
    table.is_boundary[id] = 0;
  }
  static_assert(kByteDocumentBoundary == 256, "the boundary follows the 256 byte tokens");
  if (vocab_size > kByteDocumentBoundary) table.document_start = kByteDocumentBoundary;
  return table;
}

std::uint8_t piece_text_bytes(const std::string& piece) {
  static const std::string space_marker = "\xe2\x96\x81";
  std::size_t bytes = piece.size();
  for (std::size_t at = piece.find(space_marker); at != std::string::npos; at = piece.find(space_marker, at + 3)) {
    bytes -= 2;  // three UTF-8 bytes that stand for one space
  }
  return static_cast<std::uint8_t>(bytes > 255 ? 255 : bytes);
}

TokenByteTable load_sentencepiece_vocab(const std::string& path, int vocab_size) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open the SentencePiece vocab file");
  TokenByteTable table;
  table.base_bytes.assign(vocab_size, 0);
  table.has_leading_space.assign(vocab_size, 0);
  table.is_boundary.assign(vocab_size, 1);
  static const std::string space_marker = "\xe2\x96\x81";  // U+2581, SentencePiece's word start
  std::string line;
  int id = 0;
  while (std::getline(in, line)) {
    const auto tab = line.rfind('\t');
    if (tab == std::string::npos) {
      throw InputError(path + ":" + std::to_string(id + 1) + ": expected 'piece<TAB>score'");
    }
    if (id >= vocab_size) {
      throw InputError(path + ":" + std::to_string(id + 1) + ": the vocab file has more pieces than model.vocab_size = " +
                       std::to_string(vocab_size));
    }
    std::string piece = line.substr(0, tab);
    if (piece == "<s>") table.document_start = id;
    if (!is_control_piece(piece)) {
      table.is_boundary[id] = 0;
      if (is_byte_piece(piece)) {
        table.base_bytes[id] = 1;
      } else {
        if (piece.compare(0, space_marker.size(), space_marker) == 0) {
          table.has_leading_space[id] = 1;
          piece.erase(0, space_marker.size());
        }
        table.base_bytes[id] = piece_text_bytes(piece);
      }
    }
    ++id;
  }
  if (id == 0) throw InputError(path + ": the SentencePiece vocab file is empty");
  return table;
}

double bits_per_byte(double mean_loss, double tokens, double bytes) {
  return (mean_loss / std::log(2.0)) * (tokens / bytes);
}

}  // namespace kgpt::data
