#pragma once
// One optimizer step of data-parallel training with gradient accumulation, the step `kgpt train`
// runs and `kgpt bench` times (docs/design.md, sections 2 to 7):
//   the step's micro-batches in one copy to the device; zero the gradients; the step features'
//   work before the micro-steps (late QAT's rounded matrices in place of the weights); for each of
//   grad_accum_steps micro-batches: forward, backward with the loss scaled by grad_scale (times
//   1/world_size where the transport sums), the last micro-step's backward handing finished
//   gradient spans to the averager; wait for the averaging; the features' work before the update
//   (the live weights back); the gradient norm and the clipping factor; the schedule; the optimizer
//   (which applies the clipping as it reads the gradients); the features' work after it (the
//   averages of the weights). The features are features/registry.hpp's, in its order.
// The loss and the norm stay on the device until the step's end, where one copy brings both back:
// nothing else in the step waits for the device or allocates. It returns the step's metrics; the
// log line and the history row are both made from them.

#include <memory>
#include <vector>

#include "config/deck.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "model/language_model.hpp"
#include "optim/optimizer.hpp"
#include "parallel/grad_averager.hpp"
#include "features/registry.hpp"

namespace kgpt::train {

// Where a step's micro-batches come from: the distributed loader (training) or fixed synthetic
// tokens (the benchmark). Host memory.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills this rank's next micro-batch: inputs and targets, each (B, T) token ids, row-major.
  virtual void next(int* inputs, int* targets) = 0;
};

struct StepMetrics {
  double loss = 0.0;           // mean over ranks and micro-steps
  double grad_norm = 0.0;      // global L2 norm of the averaged gradient, before clipping
  double lr_multiplier = 1.0;  // the schedule's factor for this step
  std::vector<std::string> notes;  // lines for the run's log from step features that start acting
  double seconds = 0.0;        // wall time of the step on the slowest rank
  parallel::AveragingCounters averaging;
  // With fenced phases only (the benchmark): forward; backward with zeroing and the averaging's
  // wait; optimizer with the norm, clipping and the schedule. On this rank.
  double forward_seconds = 0.0, backward_seconds = 0.0, optimizer_seconds = 0.0;
};

// The shards of parallel.zero_stage: 1 in this world (one per rank), or one shard of the whole
// buffer at stage 0 or on one rank.
std::vector<optim::Shard> optimizer_shards(const config::ResolvedDeck& deck, const model::ParameterLayout& layout);
// This rank's: what its optimizer updates and keeps state for.
optim::Shard optimizer_shard(const config::ResolvedDeck& deck, const model::ParameterLayout& layout);
// How this rank shares the work of the optimizer rules that split it, Muon's orthogonalisation
// (parallel.share_muon at zero_stage 0 on several ranks): this rank of the world; otherwise one rank
// (at zero_stage 1 the shard is the share).
optim::Sharing work_sharing(const config::ResolvedDeck& deck, int rank);

template <class T>
class TrainStep {
 public:
  // Builds the gradient averager of this world (parallel.bucket_mb, parallel.overlap) over the
  // model's gradients, and the step's token and statistics buffers. Collective over MPI_COMM_WORLD.
  // Under parallel.zero_stage: 1 the optimizer updates this rank's shard (optimizer_shard) and the
  // step then gathers every rank's updated span of the parameters on every rank. An optimizer that
  // shares its work with the other ranks (work_sharing) exchanges the results through the averager.
  // The step features `features` (features::make_step_features; owned by the caller, who evaluates
  // and checkpoints with them) act around every step.
  TrainStep(model::LanguageModel<T>& model, optim::Optimizer<T>& optimizer, const config::ResolvedDeck& deck,
            int world_size, const features::StepFeatures& features);

  // Optimizer step `step` (counted from 0) after `training_seconds` of training (the wall-clock
  // schedule uses it). Collective. With `fenced`, each phase is fenced and timed. Throws
  // parallel::AgreedFailure on every rank when the loss is not finite (the parameters are then
  // spoilt; no checkpoint is written of them).
  StepMetrics run(const ExecSpace& exec, int step, double training_seconds, BatchSource& batches, bool fenced = false);

  const parallel::GradientAverager<T>& averager() const { return *averager_; }

  // Bytes of the model's memory space the constructor allocates for this batch plan: the step's
  // tokens, and on a host build (where the staging copy lives in the same memory) their staging
  // copy too.
  static std::size_t buffer_bytes(const config::BatchPlan& plan, bool gpu) {
    const std::size_t tokens = 2 * static_cast<std::size_t>(plan.grad_accum_steps) * plan.local_sequences * plan.seq_len;
    return tokens * sizeof(int) * (gpu ? 1 : 2) + 3 * sizeof(double) + (gpu ? 0 : 2 * sizeof(double));
  }

 private:
  using Tokens = Kokkos::View<int***, Layout, MemSpace>;                     // (micro-step, B, T)
  using StagedTokens = Kokkos::View<int***, Layout, backend::StagingSpace>;  // the same, on the host

  model::LanguageModel<T>& model_;
  optim::Optimizer<T>& optimizer_;
  config::TrainConfig train_;
  config::BatchPlan plan_;
  std::unique_ptr<parallel::GradientAverager<T>> averager_;
  T backward_scale_;
  Tokens inputs_, targets_;
  StagedTokens staged_inputs_, staged_targets_;
  Kokkos::View<double[2], MemSpace> sums_;  // the loss summed over micro-steps; the squared gradient norm
  Kokkos::View<double, MemSpace> clip_factor_;
  Kokkos::View<double[2], backend::StagingSpace> host_sums_;
  // parallel.zero_stage: 1 on more than one rank: the gradients and parameters this rank updates.
  bool sharded_ = false;
  optim::Shard own_;
  const features::StepFeatures& features_;
};

}  // namespace kgpt::train
