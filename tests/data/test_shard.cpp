#include <catch2/catch.hpp>

#include <cstring>

#include "core/error.hpp"
#include "data/shard.hpp"
#include "data/token_stream.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt::data;
using kgpt::test::TempDir;

namespace {

// The message of the InputError that `action` throws, or "" when it throws none.
template <class F>
std::string input_error(F&& action) {
  try {
    action();
  } catch (const kgpt::InputError& e) {
    return e.what();
  }
  return "";
}

// A shard built byte by byte, independently of write_shard, so that corruptions can be made.
std::string raw_shard(std::int32_t magic, std::int32_t version, std::int32_t count, const std::vector<std::uint16_t>& tokens) {
  std::string bytes(kShardHeaderBytes, '\0');
  auto put = [&bytes](std::size_t at, std::int32_t v) {
    for (int b = 0; b < 4; ++b) bytes[at + b] = static_cast<char>((static_cast<std::uint32_t>(v) >> (8 * b)) & 0xff);
  };
  put(0, magic);
  put(4, version);
  put(8, count);
  for (std::uint16_t t : tokens) {
    bytes.push_back(static_cast<char>(t & 0xff));
    bytes.push_back(static_cast<char>(t >> 8));
  }
  return bytes;
}

}  // namespace

TEST_CASE("shards round-trip and match the byte layout", "[data][shard]") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {0, 1, 255, 256, 1023, 65535, 42};
  write_shard(dir.file("a_train_000000.bin"), tokens);
  // Byte-for-byte what an independent writer produces: 256 int32 header, then uint16 LE.
  CHECK(kgpt::test::read_file(dir.file("a_train_000000.bin")) == raw_shard(20240520, 1, 7, tokens));
  const ShardHeader header = read_shard_header(dir.file("a_train_000000.bin"));
  CHECK(header.magic == kShardMagic);
  CHECK(header.version == kShardVersion);
  CHECK(header.token_count == tokens.size());
  CHECK(read_shard(dir.file("a_train_000000.bin"), 65536) == tokens);
  // No temporary file is left behind.
  CHECK(find_shards(dir.file("*")) == std::vector<std::string>{dir.file("a_train_000000.bin")});
}

TEST_CASE("every kind of corrupt shard is refused with its file named", "[data][shard]") {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {5, 6, 7, 8};
  struct Case {
    const char* name;
    std::string bytes;
    const char* expected;
  };
  std::string truncated = raw_shard(kShardMagic, 1, 4, tokens);
  truncated.resize(truncated.size() - 3);
  std::string trailing = raw_shard(kShardMagic, 1, 4, tokens) + "xx";
  const std::vector<Case> cases = {
      {"bad_magic.bin", raw_shard(12345, 1, 4, tokens), "not a token shard: magic number is 12345, expected 20240520"},
      {"wrong_version.bin", raw_shard(kShardMagic, 2, 4, tokens), "unsupported shard version 2, expected 1"},
      {"truncated.bin", truncated, "(truncated)"},
      {"trailing.bin", trailing, "(trailing bytes)"},
      {"short_header.bin", std::string(100, '\0'), "shorter than the 1024-byte header"},
      {"empty.bin", std::string(), "shard file is empty"},
      {"negative_count.bin", raw_shard(kShardMagic, 1, -4, tokens), "negative token count"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string path = dir.file(c.name);
    kgpt::test::write_file(path, c.bytes);
    const std::string message = input_error([&] { read_shard(path, 65536); });
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK(message.find(c.expected) != std::string::npos);
  }
  const std::string missing = dir.file("missing.bin");
  CHECK(input_error([&] { read_shard_header(missing); }) == missing + ": cannot open shard: No such file or directory");
  CHECK(input_error([&] { read_shard_header(dir.path()); }).find("not a regular file") != std::string::npos);
}

TEST_CASE("a token at or above the vocabulary size is refused", "[data][shard]") {
  TempDir dir;
  const std::string path = dir.file("x.bin");
  write_shard(path, {1, 2, 256, 3});
  CHECK(read_shard(path, 257).size() == 4);
  CHECK(input_error([&] { read_shard(path, 256); }) ==
        path + ": token 256 at index 2 is not below the vocabulary size 256 (model.vocab_size)");
}

TEST_CASE("shard globs are sorted and a stream refuses an empty set or an empty shard", "[data][shard]") {
  TempDir dir;
  for (const char* name : {"s_train_000002.bin", "s_train_000000.bin", "s_train_000001.bin", "s_val_000000.bin"}) {
    write_shard(dir.file(name), {1, 2, 3});
  }
  CHECK(find_shards(dir.file("s_train_*.bin")) ==
        std::vector<std::string>{dir.file("s_train_000000.bin"), dir.file("s_train_000001.bin"), dir.file("s_train_000002.bin")});
  CHECK(find_shards(dir.file("nothing_*.bin")).empty());
  CHECK(input_error([] { TokenStream({}, 10); }) == "token stream: no shard files were given");
  write_shard(dir.file("zero.bin"), {});
  CHECK(input_error([&] { TokenStream({dir.file("zero.bin")}, 10); }) == dir.file("zero.bin") + ": shard holds no tokens");
}
