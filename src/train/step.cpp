#include "train/step.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "optim/schedule.hpp"
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

template <class T>
TrainStep<T>::TrainStep(model::LanguageModel<T>& model, optim::Optimizer<T>& optimizer,
                        const config::ResolvedDeck& deck, int world_size)
    : model_(model),
      optimizer_(optimizer),
      train_(deck.config.train),
      plan_(deck.plan),
      inputs_("kgpt::train::inputs", deck.plan.local_sequences, deck.plan.seq_len),
      targets_("kgpt::train::targets", deck.plan.local_sequences, deck.plan.seq_len) {
  parallel::AveragingSettings settings;
  settings.bucket_elements = static_cast<std::size_t>(deck.config.parallel.bucket_mb * 1e6 / sizeof(T));
  settings.overlap = deck.config.parallel.overlap;
  averager_ = parallel::make_gradient_averager<T>(ExecSpace(), model.parameters().grads(), world_size, settings);
  // docs/design.md, section 2: grad_scale = 1 / grad_accum_steps; a summing transport adds 1 / world_size.
  backward_scale_ = static_cast<T>(plan_.grad_scale * averager_->backward_scale_factor());
}

template <class T>
StepMetrics TrainStep<T>::run(const ExecSpace& exec, int step, double training_seconds, BatchSource& batches,
                              bool fenced) {
  StepMetrics m;
  const auto start = Clock::now();
  PhaseTimer timer(exec, fenced);
  model::zero_gradients(exec, model_.parameters());
  averager_->begin_step();
  timer.lap(m.backward_seconds);
  double loss_sum = 0;
  const model::GradientsReady ready = [this, &exec](std::size_t begin, std::size_t end) {
    averager_->ready(exec, begin, end);
  };
  for (int micro_step = 0; micro_step < plan_.grad_accum_steps; ++micro_step) {
    // docs/design.md, section 5: no gradient leaves this rank before the last micro-step.
    const bool last = micro_step + 1 == plan_.grad_accum_steps;
    averager_->begin_micro_step(last);
    batches.next(exec, inputs_, targets_);
    loss_sum += model_.forward(exec, inputs_, targets_);
    timer.lap(m.forward_seconds);
    model_.backward(exec, backward_scale_, last ? ready : model::GradientsReady{});
    timer.lap(m.backward_seconds);
  }
  averager_->finish(exec);
  timer.lap(m.backward_seconds);
  // docs/design.md, section 7: the logged loss is the mean over all ranks and micro-steps.
  const int world_size = averager_->world_size();
  m.loss = parallel::sum(loss_sum) / (plan_.grad_accum_steps * world_size);
  if (!std::isfinite(m.loss)) {
    char value[32];
    std::snprintf(value, sizeof(value), "%.4f", m.loss);
    throw parallel::AgreedFailure(ExitCode::failure,
                                  "step " + std::to_string(step + 1) + ": the train loss is " + value + "; stopping",
                                  parallel::world().rank == 0);
  }
  m.grad_norm = optim::clip_gradients(exec, model_.parameters().grads(), train_.grad_clip_norm);
  m.lr_multiplier = optim::lr_multiplier(train_, step, training_seconds);
  optimizer_.step(exec, step, m.lr_multiplier);
  exec.fence();
  timer.lap(m.optimizer_seconds);
  m.averaging = averager_->step_counters();
  // Stop decisions and the wall-clock schedule use the slowest rank's time, the same on all ranks.
  m.seconds = parallel::max(seconds_since(start));
  return m;
}

template class TrainStep<float>;

}  // namespace kgpt::train
