#pragma once
// How kgpt turns text into tokens and back outside training (kgpt sample, the multiple-choice
// tasks): the byte tokenizer, the deck's SentencePiece model (data.vocab_file must then name the
// .model) or its tiktoken ranks, as kgpt prepare encodes documents.

#include <memory>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "data/byte_tokenizer.hpp"
#include "data/deck_tokenizer.hpp"
#include "data/sentencepiece.hpp"
#include "data/tiktoken.hpp"

namespace kgpt::inference {

// The byte tokenizer, the deck's SentencePiece model or its tiktoken ranks. `path`: the checkpoint or
// artifact, for messages.
class TextCodec {
 public:
  TextCodec(const config::ResolvedDeck& deck, const std::string& path) {
    if (deck.config.data.tokenizer == config::Tokenizer::byte) return;
    const std::string& file = deck.config.data.vocab_file;
    if (deck.config.data.tokenizer == config::Tokenizer::tiktoken) {
      try {
        tiktoken_ = std::make_unique<data::TiktokenTokenizer>(data::load_deck_tiktoken(deck.config.data, deck.config.model.vocab_size));
      } catch (const InputError& e) {
        throw InputError(path + ": " + e.what());
      }
      if (tiktoken_->end_of_text() < 0) {
        throw InputError(file + ": encoding " + tiktoken_->encoding() + " has no <|endoftext|>, which starts every document");
      }
      return;
    }
    if (!data::is_model_file(file)) {
      throw InputError(path + ": kgpt encodes and decodes this deck's text with its SentencePiece model, and its "
                       "data.vocab_file is '" + file + "'; name the .model with --set data.vocab_file=PATH.model");
    }
    model_ = std::make_unique<data::SentencePieceModel>(data::SentencePieceModel::load(file));
    if (model_->vocab_size() > deck.config.model.vocab_size) {
      throw InputError(file + ": the model has " + std::to_string(model_->vocab_size()) + " pieces, more than model.vocab_size = " +
                       std::to_string(deck.config.model.vocab_size) + " of " + path);
    }
  }

  // The tokens of text that continues other text (no document start before them).
  std::vector<int> tokens(const std::string& text) const {
    if (tiktoken_) return tiktoken_->encode(text);
    if (!model_) return std::vector<int>(text.begin(), text.end());
    return model_->encode_text(text);
  }

  // The document start, then the prompt's tokens.
  std::vector<int> prompt(const std::string& text) const {
    if (tiktoken_) {
      std::vector<int> tokens = {tiktoken_->end_of_text()};
      tiktoken_->encode_into(text, false, tokens);
      return tokens;
    }
    if (!model_) {
      std::vector<int> tokens = {data::kByteDocumentBoundary};
      for (unsigned char byte : text) tokens.push_back(byte);
      return tokens;
    }
    std::vector<int> tokens = {model_->bos_id()};
    const std::vector<int> encoded = model_->encode_text(text);
    tokens.insert(tokens.end(), encoded.begin(), encoded.end());
    return tokens;
  }

  // Special tokens and ids beyond the vocabulary (a model's padded vocab_size) stand for no text.
  bool ends_document(int token) const {
    if (tiktoken_) return tiktoken_->is_special(token) || tiktoken_->token_bytes(token).empty();
    return model_ ? model_->is_boundary(token) : token > 255;
  }

  // The text of the generated tokens; unless `final`, without a UTF-8 character whose bytes have
  // not all come yet (byte-fallback pieces arrive one byte at a time).
  std::string text(const std::vector<int>& tokens, bool final) const {
    if (tiktoken_) {
      std::string bytes;
      for (int token : tokens) bytes += tiktoken_->token_bytes(token);
      return final ? bytes : bytes.substr(0, complete_utf8_prefix(bytes));
    }
    if (!model_) return std::string(tokens.begin(), tokens.end());
    std::size_t take = tokens.size();
    if (!final) {
      std::size_t first_byte = tokens.size();
      while (first_byte > 0 && model_->byte_value(tokens[first_byte - 1]) >= 0) --first_byte;
      for (std::size_t i = first_byte; i < tokens.size();) {
        const int lead = model_->byte_value(tokens[i]);
        const std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (i + length > tokens.size()) {
          take = i;
          break;
        }
        i += length;
      }
    }
    return model_->decode(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(take)));
  }

 private:
  // The length of `bytes` without a last UTF-8 character whose bytes have not all come yet.
  static std::size_t complete_utf8_prefix(const std::string& bytes) {
    std::size_t start = bytes.size();
    for (int back = 0; back < 4 && start > 0; ++back) {
      const auto c = static_cast<unsigned char>(bytes[start - 1]);
      if ((c & 0xC0) != 0x80) {  // the lead byte of the last character (or an ASCII byte)
        const std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return bytes.size() - (start - 1) >= length ? bytes.size() : start - 1;
      }
      --start;
    }
    return bytes.size();
  }

  std::unique_ptr<data::SentencePieceModel> model_;
  std::unique_ptr<data::TiktokenTokenizer> tiktoken_;
};

}  // namespace kgpt::inference
