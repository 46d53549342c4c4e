#pragma once
// The distributed loader (docs/design.md, section 4): every micro-step takes
// (local + 1) * world_size consecutive tokens from the stream; rank r keeps
// [r * (local + 1), (r + 1) * (local + 1)); inputs are that span without its last token and
// targets without its first, shaped (local / seq_len, seq_len).

#include <cstdint>
#include <vector>

#include "data/token_stream.hpp"

namespace kgpt::data {

struct TokenBatch {
  long long sequences = 0;
  int seq_len = 0;
  std::vector<std::int32_t> inputs;   // row-major (sequences, seq_len)
  std::vector<std::int32_t> targets;  // inputs shifted by one token
  std::uint64_t first_token = 0;      // stream position of this rank's span, for tests and logs
};

class DistributedLoader {
 public:
  // `local_tokens` must be a positive multiple of `seq_len` (config::plan_batch checks the deck).
  DistributedLoader(TokenStream stream, int rank, int world_size, long long local_tokens, int seq_len);

  // Fills `batch` with this rank's next micro-batch; reuses its storage.
  void next(TokenBatch& batch);

  const TokenStream& stream() const { return stream_; }
  TokenStream& stream() { return stream_; }

 private:
  TokenStream stream_;
  int rank_;
  int world_size_;
  long long local_tokens_;
  int seq_len_;
  std::vector<std::uint16_t> span_;  // local_tokens + 1
};

}  // namespace kgpt::data
