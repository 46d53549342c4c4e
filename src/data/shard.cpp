#include "data/shard.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/files.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace kgpt::data {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are little-endian; kgpt reads them directly");

std::string system_error(const std::string& path, const std::string& what) {
  return path + ": " + what + ": " + std::strerror(errno);
}

class File {
 public:
  File() = default;
  ~File() {
    if (file_) std::fclose(file_);
  }
  void open(const std::string& path, const char* mode) { file_ = std::fopen(path.c_str(), mode); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  std::FILE* get() const { return file_; }

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace

void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  if (tokens.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(path + ": " + text::with_thousands(tokens.size()) +
                     " tokens do not fit one shard (the header counts them in an int32)");
  }
  std::int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());

  write_file_atomically(path, {ByteRange{header, sizeof(header)},
                               ByteRange{tokens.data(), tokens.size() * sizeof(std::uint16_t)}});
}

namespace {

// Opens the shard first and checks what was opened (fstat), so that the size checked is the size of
// the file read. Opening blocks where the file system blocks (a hung network mount, a FIFO with no
// writer); the stall watchdog names the file then.
ShardHeader open_shard(const std::string& path, File& in) {
  in.open(path, "rb");
  if (!in.get()) throw InputError(system_error(path, "cannot open shard"));
  struct stat info {};
  if (::fstat(::fileno(in.get()), &info) != 0) throw InputError(system_error(path, "cannot open shard"));
  if (!S_ISREG(info.st_mode)) throw InputError(path + ": not a regular file, cannot be a shard");
  const auto size = static_cast<std::uint64_t>(info.st_size);
  if (size == 0) throw InputError(path + ": shard file is empty (a shard starts with a 1024-byte header)");
  if (size < kShardHeaderBytes) {
    throw InputError(path + ": shard is truncated: " + std::to_string(size) +
                     " bytes, shorter than the 1024-byte header");
  }
  std::int32_t header[kShardHeaderInts];
  if (std::fread(header, sizeof(header), 1, in.get()) != 1) throw InputError(system_error(path, "cannot read shard header"));

  ShardHeader result;
  result.magic = header[0];
  result.version = header[1];
  if (result.magic != kShardMagic) {
    throw InputError(path + ": not a token shard: magic number is " + std::to_string(result.magic) + ", expected " +
                     std::to_string(kShardMagic));
  }
  if (result.version != kShardVersion) {
    throw InputError(path + ": unsupported shard version " + std::to_string(result.version) + ", expected " +
                     std::to_string(kShardVersion));
  }
  if (header[2] < 0) throw InputError(path + ": shard header has a negative token count " + std::to_string(header[2]));
  result.token_count = static_cast<std::uint64_t>(header[2]);
  const std::uint64_t expected = kShardHeaderBytes + 2 * result.token_count;
  if (size != expected) {
    throw InputError(path + ": shard size is " + std::to_string(size) + " bytes but its header promises " +
                     text::with_thousands(result.token_count) + " tokens, i.e. 1024 + 2 x count = " +
                     std::to_string(expected) + " bytes (" + (size < expected ? "truncated" : "trailing bytes") + ")");
  }
  return result;
}

}  // namespace

ShardHeader read_shard_header(const std::string& path) {
  File in;
  return open_shard(path, in);
}

std::vector<std::uint16_t> read_shard(const std::string& path, int vocab_size) {
  File in;
  const ShardHeader header = open_shard(path, in);
  std::vector<std::uint16_t> tokens(header.token_count);
  if (!tokens.empty() && std::fread(tokens.data(), sizeof(std::uint16_t), tokens.size(), in.get()) != tokens.size()) {
    throw InputError(system_error(path, "cannot read shard tokens"));
  }
  const auto bad = std::find_if(tokens.begin(), tokens.end(),
                                [vocab_size](std::uint16_t t) { return static_cast<int>(t) >= vocab_size; });
  if (bad != tokens.end()) {
    throw InputError(path + ": token " + std::to_string(*bad) + " at index " +
                     std::to_string(bad - tokens.begin()) + " is not below the vocabulary size " +
                     std::to_string(vocab_size) + " (model.vocab_size)");
  }
  return tokens;
}

std::vector<std::string> find_shards(const std::string& pattern) {
  glob_t matches{};
  std::vector<std::string> files;
  if (::glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace kgpt::data
