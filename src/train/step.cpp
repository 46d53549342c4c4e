#include "train/step.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/error.hpp"
#include "core/profile.hpp"
#include "optim/schedule.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace kgpt::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Adds the time since the last lap to one phase; with fencing off it costs nothing.
class PhaseTimer {
 public:
  PhaseTimer(const ExecSpace& exec, bool fenced) : exec_(exec), fenced_(fenced), mark_(Clock::now()) {}
  void lap(double& total) {
    if (!fenced_) return;
    exec_.fence();
    const auto now = Clock::now();
    total += std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
  }

 private:
  const ExecSpace& exec_;
  bool fenced_;
  Clock::time_point mark_;
};

}  // namespace

std::vector<optim::Shard> optimizer_shards(const config::ResolvedDeck& deck, const model::ParameterLayout& layout) {
  if (deck.config.parallel.zero_stage == 0 || deck.plan.world_size == 1) return {optim::whole_layout(layout)};
  return optim::shard_layout(layout, deck.plan.world_size);
}

optim::Shard optimizer_shard(const config::ResolvedDeck& deck, const model::ParameterLayout& layout) {
  const std::vector<optim::Shard> shards = optimizer_shards(deck, layout);
  return shards.size() == 1 ? shards.front() : shards.at(static_cast<std::size_t>(parallel::world().rank));
}

optim::Sharing work_sharing(const config::ResolvedDeck& deck, int rank) {
  const config::Config& c = deck.config;
  if (c.parallel.zero_stage != 0 || !c.parallel.share_muon || deck.plan.world_size == 1 || !optim::shares_work(c)) {
    return {};
  }
  return {rank, deck.plan.world_size};
}

template <class T>
TrainStep<T>::TrainStep(model::LanguageModel<T>& model, optim::Optimizer<T>& optimizer,
                        const config::ResolvedDeck& deck, int world_size, const features::StepFeatures& features)
    : model_(model),
      optimizer_(optimizer),
      train_(deck.config.train),
      plan_(deck.plan),
      inputs_("kgpt::train::inputs", deck.plan.grad_accum_steps, deck.plan.local_sequences, deck.plan.seq_len),
      targets_("kgpt::train::targets", deck.plan.grad_accum_steps, deck.plan.local_sequences, deck.plan.seq_len),
      staged_inputs_("kgpt::train::staged_inputs", deck.plan.grad_accum_steps, deck.plan.local_sequences,
                     deck.plan.seq_len),
      staged_targets_("kgpt::train::staged_targets", deck.plan.grad_accum_steps, deck.plan.local_sequences,
                      deck.plan.seq_len),
      sums_("kgpt::train::sums"),
      clip_factor_("kgpt::train::clip_factor"),
      host_sums_("kgpt::train::host_sums"),
      features_(features) {
  parallel::AveragingSettings settings;
  settings.bucket_elements = static_cast<std::size_t>(deck.config.parallel.bucket_mb * 1e6 / sizeof(T));
  settings.overlap = deck.config.parallel.overlap;
  const std::vector<optim::Shard> shards = optimizer_shards(deck, model.parameters().layout());
  if (shards.size() > 1) {
    // parallel.zero_stage: 1: each rank needs the averaged gradients of its own shard only.
    sharded_ = true;
    own_ = shards.at(static_cast<std::size_t>(parallel::world().rank));
    for (const optim::Shard& s : shards) settings.owners.push_back({s.begin, s.end});
  }
  averager_ = parallel::make_gradient_averager<T>(ExecSpace(), model.parameters().grads(), world_size, settings);
  parallel::GradientAverager<T>* const averager = averager_.get();
  optimizer.exchange_with([averager](const ExecSpace& exec, void* data, std::size_t bytes) {
    averager->exchange_bytes(exec, data, bytes);
  });
  // docs/design.md, section 2: grad_scale = 1 / grad_accum_steps; a summing transport adds 1 / world_size.
  backward_scale_ = static_cast<T>(plan_.grad_scale * averager_->backward_scale_factor());
}

template <class T>
StepMetrics TrainStep<T>::run(const ExecSpace& exec, int step, double training_seconds, BatchSource& batches,
                              bool fenced) {
  StepMetrics m;
  const auto start = Clock::now();
  const int accum = plan_.grad_accum_steps, b = static_cast<int>(plan_.local_sequences), t = plan_.seq_len;
  const std::int64_t number = step + 1;
  parallel::progress(parallel::Phase::data, number);
  // docs/design.md, section 4: this rank's slices of every micro-batch of the step, in one copy.
  for (int micro_step = 0; micro_step < accum; ++micro_step) {
    batches.next(&staged_inputs_(micro_step, 0, 0), &staged_targets_(micro_step, 0, 0));
  }
  PhaseTimer timer(exec, fenced);
  {
    const profile::Phase phase("step start");
    Kokkos::deep_copy(exec, inputs_, staged_inputs_);
    Kokkos::deep_copy(exec, targets_, staged_targets_);
    model::zero_gradients(exec, model_.parameters());
    Kokkos::deep_copy(exec, sums_, 0.0);
    averager_->begin_step();
  }
  m.lr_multiplier = optim::lr_multiplier(train_, step, training_seconds);
  for (const auto& feature : features_) {
    const profile::Region region(exec, feature->name());
    std::string note = feature->before_micro_steps(exec, step, m.lr_multiplier, model_.parameters().values());
    if (!note.empty()) m.notes.push_back(std::move(note));
  }
  timer.lap(m.backward_seconds);
  const Kokkos::View<double, MemSpace> loss_sum(sums_.data());
  const Kokkos::View<double, MemSpace> norm_sq(sums_.data() + 1);
  const model::GradientsReady ready = [this, &exec](std::size_t begin, std::size_t end) {
    averager_->ready(exec, begin, end);
  };
  for (int micro_step = 0; micro_step < accum; ++micro_step) {
    // docs/design.md, section 5: no gradient leaves this rank before the last micro-step.
    const bool last = micro_step + 1 == accum;
    averager_->begin_micro_step(last);
    const std::size_t offset = static_cast<std::size_t>(micro_step) * b * t;
    const ConstTokenMatrix inputs(inputs_.data() + offset, b, t), targets(targets_.data() + offset, b, t);
    {
      parallel::progress(parallel::Phase::forward, number);
      const profile::Phase phase("forward");
      if (micro_step > 0) model_.reuse_weight_shadow();  // the weights change only in the optimizer step
      model_.forward(exec, inputs, targets, loss_sum);
    }
    timer.lap(m.forward_seconds);
    {
      parallel::progress(parallel::Phase::backward, number);
      const profile::Phase phase("backward");
      model_.backward(exec, backward_scale_, last ? ready : model::GradientsReady{});
    }
    timer.lap(m.backward_seconds);
  }
  {
    parallel::progress(parallel::Phase::averaging, number);
    const profile::Phase phase("averaging");
    const profile::Region region(exec, "gradient averaging (wait)");
    averager_->finish(exec);
  }
  // The optimizer updates the live weights (late QAT's gradients were taken at rounded ones).
  for (const auto& feature : features_) {
    const profile::Region region(exec, feature->name());
    feature->before_update(exec, model_.parameters().values());
  }
  timer.lap(m.backward_seconds);
  parallel::progress(parallel::Phase::optimizer, number);
  const profile::Phase phase("optimizer");
  if (train_.grad_clip_norm > 0) {
    // Clipping needs the global norm before any update reads a gradient. Under zero stage 1 a rank
    // holds the averaged gradients of its own shard only: the shards' parts are summed.
    const Vector<T>& grads = model_.parameters().grads();
    optim::gradient_norm_squared(exec, grads, sharded_ ? own_.begin : 0, sharded_ ? own_.end : grads.extent(0), norm_sq);
    if (sharded_) averager_->sum_scalar(exec, norm_sq.data());
    optim::clip_factor<T>(exec, train_.grad_clip_norm, norm_sq, clip_factor_);
    optimizer_.step(exec, step, m.lr_multiplier, clip_factor_.data());
  } else {
    // The norm comes from the update passes themselves.
    optimizer_.step(exec, step, m.lr_multiplier, nullptr, norm_sq.data());
  }
  if (sharded_) {
    // parallel.zero_stage: 1: each rank updated its own span; every rank takes everyone's.
    parallel::progress_detail("gathering the updated parameters");
    const profile::Region region(exec, "parameter all-gather (zero stage 1)");
    averager_->gather_parameters(exec, model_.parameters().values());
  }
  for (const auto& feature : features_) {
    const profile::Region region(exec, feature->name());
    feature->after_update(exec, step, m.lr_multiplier, model_.parameters().values());
  }
  Kokkos::deep_copy(exec, host_sums_, sums_);
  exec.fence();
  timer.lap(m.optimizer_seconds);
  // docs/design.md, section 7: the logged loss is the mean over all ranks and micro-steps.
  parallel::progress(parallel::Phase::averaging, number);
  parallel::progress_detail("summing the loss over ranks");
  const int world_size = averager_->world_size();
  m.loss = parallel::sum(host_sums_(0)) / (accum * world_size);
  // Under zero stage 1 without clipping each rank's update passes saw its own span's gradients.
  const bool partial_norm = sharded_ && train_.grad_clip_norm <= 0;
  m.grad_norm = std::sqrt(partial_norm ? parallel::sum(host_sums_(1)) : host_sums_(1));
  m.averaging = averager_->step_counters();
  if (!std::isfinite(m.loss)) {
    char value[32];
    std::snprintf(value, sizeof(value), "%.4f", m.loss);
    throw parallel::AgreedFailure(ExitCode::failure,
                                  "step " + std::to_string(step + 1) + ": the train loss is " + value + "; stopping",
                                  parallel::world().rank == 0);
  }
  // Stop decisions and the wall-clock schedule use the slowest rank's time, the same on all ranks.
  m.seconds = parallel::max(seconds_since(start));
  return m;
}

template class TrainStep<float>;

}  // namespace kgpt::train
