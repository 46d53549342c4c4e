#pragma once
// `kgpt inspect` of a token shard: its header, tokens, id range and documents, and its first
// tokens as text, decoded with the tokenizer that the <prefix>_prepare.yaml kgpt prepare wrote
// beside it records (byte, SentencePiece or tiktoken).

#include <ostream>
#include <string>

namespace kgpt::data {

// True when the file starts with the shard magic number.
bool is_shard_file(const std::string& path);

// Throws InputError naming the file when it is no valid shard.
void describe_shard(const std::string& path, std::ostream& out, int peek_tokens = 64);

}  // namespace kgpt::data
