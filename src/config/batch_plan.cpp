#include "config/batch_plan.hpp"

#include "config/config.hpp"

namespace kgpt::config {

std::string plan_batch(const TrainConfig& train, int world_size, BatchPlan& plan) {
  if (world_size < 1) return "world size must be at least 1, got " + std::to_string(world_size);
  if (train.accum_total % world_size != 0) {
    return "train.accum_total = " + std::to_string(train.accum_total) + " is not divisible by the world size " +
           std::to_string(world_size) + " (grad_accum_steps = accum_total / world_size must be a whole number)";
  }
  const int accum = train.accum_total / world_size;
  const long long divisor = static_cast<long long>(world_size) * accum * train.seq_len;
  if (train.global_batch_tokens % divisor != 0) {
    return "train.global_batch_tokens = " + std::to_string(train.global_batch_tokens) +
           " is not divisible by world_size x grad_accum_steps x seq_len = " + std::to_string(world_size) + " x " +
           std::to_string(accum) + " x " + std::to_string(train.seq_len) + " = " + std::to_string(divisor);
  }
  plan.world_size = world_size;
  plan.grad_accum_steps = accum;
  plan.grad_scale = 1.0 / accum;
  plan.local_tokens = train.global_batch_tokens / (static_cast<long long>(world_size) * accum);
  plan.local_sequences = plan.local_tokens / train.seq_len;
  plan.seq_len = train.seq_len;
  return "";
}

}  // namespace kgpt::config
