#include "data/token_stream.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "data/shard.hpp"
#include "parallel/watchdog.hpp"

namespace kgpt::data {

TokenStream::TokenStream(std::vector<std::string> files, int vocab_size)
    : files_(std::move(files)), vocab_size_(vocab_size) {
  if (files_.empty()) throw InputError("token stream: no shard files were given");
  for (const auto& file : files_) {
    const ShardHeader header = read_shard_header(file);
    if (header.token_count == 0) throw InputError(file + ": shard holds no tokens");
    counts_.push_back(header.token_count);
    total_tokens_ += header.token_count;
  }
}

void TokenStream::load(std::size_t shard) {
  if (loaded_ == shard) return;
  parallel::progress_detail("reading " + files_[shard]);
  tokens_ = read_shard(files_[shard], vocab_size_);
  parallel::progress_detail("");
  if (tokens_.size() != counts_[shard]) {
    throw InputError(files_[shard] + ": shard changed while the run was reading it");
  }
  loaded_ = shard;
}

template <class Sink>
void TokenStream::advance(std::size_t count, Sink&& sink) {
  while (count > 0) {
    if (offset_ == counts_[shard_]) {
      shard_ = (shard_ + 1) % files_.size();
      offset_ = 0;
    }
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count, counts_[shard_] - offset_));
    sink(n);
    offset_ += n;
    consumed_ += n;
    count -= n;
  }
}

void TokenStream::take(std::size_t count, std::uint16_t* out) {
  advance(count, [&](std::size_t n) {
    load(shard_);
    std::memcpy(out, tokens_.data() + offset_, n * sizeof(std::uint16_t));
    out += n;
  });
}

void TokenStream::skip(std::size_t count) {
  advance(count, [](std::size_t) {});
}

void TokenStream::seek(std::uint64_t consumed) {
  shard_ = 0;
  offset_ = 0;
  consumed_ = 0;
  // Whole passes over the data first, then the remainder shard by shard.
  const std::uint64_t remainder = consumed % total_tokens_;
  skip(static_cast<std::size_t>(remainder));
  consumed_ = consumed;
}

}  // namespace kgpt::data
