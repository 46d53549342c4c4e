#pragma once
// The deck's tokenizer (data.tokenizer, data.vocab_file, data.tiktoken_encoding) where training and
// evaluation need it: val_bpb's bytes per token, and the tiktoken vocabulary itself.

#include <string>

#include "config/config.hpp"
#include "data/tiktoken.hpp"
#include "data/token_bytes.hpp"

namespace kgpt::data {

// The encoding name data/tiktoken.hpp takes ("auto", "gpt2", ...).
std::string tiktoken_encoding_name(const config::DataConfig& data);

// data.vocab_file read as tiktoken's ranks. Throws InputError naming the file when it cannot be
// read, and when its ids (special tokens included) go beyond model.vocab_size.
TiktokenTokenizer load_deck_tiktoken(const config::DataConfig& data, int vocab_size);

// Bytes per token for val_bpb, by data.tokenizer.
TokenByteTable deck_token_table(const config::DataConfig& data, int vocab_size);

}  // namespace kgpt::data
