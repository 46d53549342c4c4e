#include "data/loader.hpp"

#include <string>

#include "core/error.hpp"

namespace kgpt::data {

DistributedLoader::DistributedLoader(TokenStream stream, int rank, int world_size, long long local_tokens,
                                     int seq_len)
    : stream_(std::move(stream)),
      rank_(rank),
      world_size_(world_size),
      local_tokens_(local_tokens),
      seq_len_(seq_len) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(ExitCode::failure, "loader: rank " + std::to_string(rank) + " is outside world size " +
                                       std::to_string(world_size));
  }
  if (seq_len < 1 || local_tokens < seq_len || local_tokens % seq_len != 0) {
    throw Error(ExitCode::failure, "loader: tokens per rank per micro-step (" + std::to_string(local_tokens) +
                                       ") must be a positive multiple of seq_len (" + std::to_string(seq_len) + ")");
  }
  span_.resize(static_cast<std::size_t>(local_tokens + 1));
}

void DistributedLoader::next(TokenBatch& batch) {
  const std::size_t span = span_.size();
  // Every rank walks the same stream; the other ranks' spans are skipped, not copied.
  stream_.skip(span * static_cast<std::size_t>(rank_));
  batch.first_token = stream_.tokens_consumed();
  stream_.take(span, span_.data());
  stream_.skip(span * static_cast<std::size_t>(world_size_ - 1 - rank_));

  batch.sequences = local_tokens_ / seq_len_;
  batch.seq_len = seq_len_;
  batch.inputs.resize(span - 1);
  batch.targets.resize(span - 1);
  for (std::size_t i = 0; i + 1 < span; ++i) {
    batch.inputs[i] = span_[i];
    batch.targets[i] = span_[i + 1];
  }
}

}  // namespace kgpt::data
