#pragma once
// One endless stream of tokens over shard files in sorted order, wrapping from the last back to
// the first. Only one shard is held in memory at a time.

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::data {

class TokenStream {
 public:
  // Checks every file's header up front, so a bad shard stops the run before training starts.
  // Throws InputError when `files` is empty or a shard is invalid or holds no tokens.
  TokenStream(std::vector<std::string> files, int vocab_size);

  // Copies the next `count` tokens to `out`, crossing shard boundaries and wrapping as needed.
  void take(std::size_t count, std::uint16_t* out);
  // Advances by `count` tokens without copying them.
  void skip(std::size_t count);

  // Tokens taken or skipped since the start: the stream position for checkpoints.
  std::uint64_t tokens_consumed() const { return consumed_; }
  // Moves to the position reached after `consumed` tokens from the start.
  void seek(std::uint64_t consumed);

  std::uint64_t total_tokens() const { return total_tokens_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  template <class Sink>
  void advance(std::size_t count, Sink&& sink);
  void load(std::size_t shard);

  std::vector<std::string> files_;
  std::vector<std::uint64_t> counts_;
  int vocab_size_;
  std::uint64_t total_tokens_ = 0;
  std::size_t shard_ = 0;        // index of the shard in `tokens_`
  std::size_t loaded_ = SIZE_MAX;
  std::uint64_t offset_ = 0;     // next token within the shard
  std::uint64_t consumed_ = 0;
  std::vector<std::uint16_t> tokens_;
};

}  // namespace kgpt::data
