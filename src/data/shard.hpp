#pragma once
// Token shards as parameter-golf, llm.c and modded-nanogpt write them: a header of 256
// little-endian int32 (magic 20240520, version 1, token count, then zeros) followed by the tokens
// as little-endian uint16. A valid file is exactly 1024 + 2 * count bytes long.

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::data {

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr std::size_t kShardHeaderInts = 256;
constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);

struct ShardHeader {
  std::int32_t magic = 0;
  std::int32_t version = 0;
  std::uint64_t token_count = 0;
};

// Writes `tokens` as a shard. The file appears complete or not at all: it is written beside the
// target under a temporary name, flushed to disk, then renamed.
void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

// Reads and checks the header: magic, version, and that the file size matches the count.
// Throws InputError naming the file.
ShardHeader read_shard_header(const std::string& path);

// Reads the whole shard, checks its header and that every token is below `vocab_size`.
// Throws InputError naming the file (and the first bad token's index and value).
std::vector<std::uint16_t> read_shard(const std::string& path, int vocab_size);

// The files matching a glob pattern, sorted by name. Empty when nothing matches.
std::vector<std::string> find_shards(const std::string& pattern);

}  // namespace kgpt::data
