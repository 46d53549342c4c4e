#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace kgpt::optim {

namespace {

constexpr double kPi = 3.14159265358979323846;

double warmdown_factor(const config::TrainConfig& train, int step, double elapsed_seconds) {
  if (train.warmdown_iters <= 0) return 1.0;
  if (train.max_wallclock_seconds <= 0) {
    const int start = std::max(train.iterations - train.warmdown_iters, 0);
    if (step < start || step >= train.iterations) return 1.0;
    return std::max(static_cast<double>(train.iterations - step) / std::max(train.warmdown_iters, 1), 0.0);
  }
  const double step_seconds = elapsed_seconds / std::max(step, 1);
  const double warmdown_seconds = train.warmdown_iters * step_seconds;
  const double remaining = std::max(train.max_wallclock_seconds - elapsed_seconds, 0.0);
  return remaining <= warmdown_seconds ? remaining / std::max(warmdown_seconds, 1e-9) : 1.0;
}

}  // namespace

double lr_multiplier(const config::TrainConfig& train, int step, double elapsed_seconds) {
  double base = 1.0;
  if (step < train.warmup_steps) {
    base = static_cast<double>(step + 1) / (train.warmup_steps + 1);
  } else if (train.schedule == config::Schedule::cosine) {
    const int span = std::max(train.iterations - train.warmup_steps, 1);
    const double progress = std::min(static_cast<double>(step - train.warmup_steps) / span, 1.0);
    base = train.min_lr_fraction + (1.0 - train.min_lr_fraction) * 0.5 * (1.0 + std::cos(kPi * progress));
  }
  return base * warmdown_factor(train, step, elapsed_seconds);
}

}  // namespace kgpt::optim
