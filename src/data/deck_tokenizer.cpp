#include "data/deck_tokenizer.hpp"

#include "core/error.hpp"
#include "data/sentencepiece.hpp"

namespace kgpt::data {

std::string tiktoken_encoding_name(const config::DataConfig& data) { return config::name_of(data.tiktoken_encoding); }

TiktokenTokenizer load_deck_tiktoken(const config::DataConfig& data, int vocab_size) {
  TiktokenTokenizer tokenizer = TiktokenTokenizer::load(data.vocab_file, tiktoken_encoding_name(data));
  if (tokenizer.vocab_size() > vocab_size) {
    throw InputError(data.vocab_file + ": encoding " + tokenizer.encoding() + " has ids up to " +
                     std::to_string(tokenizer.vocab_size() - 1) + " (its special tokens included), beyond model.vocab_size = " +
                     std::to_string(vocab_size) + "; set model.vocab_size to at least " + std::to_string(tokenizer.vocab_size()));
  }
  return tokenizer;
}

TokenByteTable deck_token_table(const config::DataConfig& data, int vocab_size) {
  switch (data.tokenizer) {
    case config::Tokenizer::byte: return byte_tokenizer_table(vocab_size);
    case config::Tokenizer::sentencepiece: return load_sentencepiece_table(data.vocab_file, vocab_size);
    case config::Tokenizer::tiktoken: return load_deck_tiktoken(data, vocab_size).byte_table(vocab_size);
  }
  return byte_tokenizer_table(vocab_size);
}

}  // namespace kgpt::data
