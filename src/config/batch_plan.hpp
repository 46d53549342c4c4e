#pragma once
// How a global batch is split over ranks and micro-steps (docs/design.md, sections 2 and 3).

#include <string>

namespace kgpt::config {

struct TrainConfig;

struct BatchPlan {
  int world_size = 1;
  int grad_accum_steps = 1;       // accum_total / world_size
  double grad_scale = 1.0;        // 1 / grad_accum_steps
  long long local_tokens = 0;     // tokens per rank per micro-step
  long long local_sequences = 0;  // local_tokens / seq_len
  int seq_len = 0;
};

// Returns "" and fills `plan` when the batch splits evenly, else a message naming the numbers.
std::string plan_batch(const TrainConfig& train, int world_size, BatchPlan& plan);

}  // namespace kgpt::config
