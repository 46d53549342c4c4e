#include "train/progress.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/backend.hpp"
#include "core/kokkos_compat.hpp"
#include "core/profile.hpp"
#include "core/text.hpp"
#include "model/family.hpp"

namespace kgpt::train {

using text::fixed;
using text::significant;

namespace {

constexpr std::size_t kTimeLeftWindow = 101;  // steps whose median time estimates the rest

// Device memory in use on a GPU build; the peak resident set of this process otherwise.
double memory_bytes() {
  return backend::on_gpu ? compat::device_memory_used_bytes() : profile::process_peak_resident_bytes();
}

}  // namespace

double mfu_peak_flops(const config::ModelConfig& model) {
  return backend::on_gpu && model.precision == config::Precision::bf16 ? 989.4e12 : 0;
}

std::vector<io::Scalar> step_scalars(const io::TrainRow& row, bool with_mfu) {
  std::vector<io::Scalar> scalars = {
      {"train/loss", row.loss},
      {"train/lr_matrix", row.lr_matrix},
      {"train/lr_scalar", row.lr_scalar},
      {"train/lr_embedding", row.lr_embedding},
      {"train/lr_head", row.lr_head},
      {"train/grad_norm", row.grad_norm},
      {"train/step_ms", row.step_ms},
      {"train/tokens_per_s", row.tokens_per_s},
      {"train/model_flops_per_s", row.model_flops_per_s},
      {"train/averaging_ms", row.averaging_ms},
      {"train/memory_bytes", row.memory_bytes},
      {"train/time_left_s", row.time_left_s},
  };
  if (with_mfu) scalars.push_back({"train/mfu", row.mfu});
  return scalars;
}

ProgressReport::ProgressReport(io::RunLog& log, io::History* history, io::EventFile* events, const config::Config& config,
                               const optim::Optimizer<float>& optimizer, std::vector<std::string> task_names)
    : log_(log),
      history_(history),
      events_(events),
      train_(config.train),
      optimizer_(optimizer),
      task_names_(std::move(task_names)),
      flops_per_token_(model::family(config.model.family).flops_per_token(config.model, config.train.seq_len)),
      peak_flops_(mfu_peak_flops(config.model)) {}

double ProgressReport::time_left(int step, double step_seconds, double training_seconds) {
  recent_step_seconds_.push_back(step_seconds);
  if (recent_step_seconds_.size() > kTimeLeftWindow) recent_step_seconds_.pop_front();
  std::vector<double> sorted(recent_step_seconds_.begin(), recent_step_seconds_.end());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  double left = sorted[sorted.size() / 2] * std::max(0, train_.iterations - step);
  if (train_.max_wallclock_seconds > 0) left = std::min(left, std::max(0.0, train_.max_wallclock_seconds - training_seconds));
  return left;
}

void ProgressReport::flush_events() {
  if (events_) events_->flush();
}

void ProgressReport::step(int step, const StepMetrics& m, std::int64_t tokens, double wall_seconds,
                          double training_seconds, bool force_line) {
  const double tokens_per_s = static_cast<double>(train_.global_batch_tokens) / m.seconds;
  auto lr = [&](model::ParamGroup group) { return optimizer_.group_lr(group) * m.lr_multiplier; };
  const double left = time_left(step, m.seconds, training_seconds);
  const double model_flops_per_s = flops_per_token_ * tokens_per_s;
  const double mfu = peak_flops_ > 0 ? model_flops_per_s / peak_flops_ : std::numeric_limits<double>::quiet_NaN();
  const double memory = history_ || events_ ? memory_bytes() : 0;
  if (history_ || events_) {
    io::TrainRow row;
    row.step = step;
    row.tokens = tokens;
    row.loss = m.loss;
    row.lr_matrix = lr(model::ParamGroup::matrix);
    row.lr_scalar = lr(model::ParamGroup::scalar);
    row.lr_embedding = lr(model::ParamGroup::embedding);
    row.lr_head = lr(model::ParamGroup::head);
    row.grad_norm = m.grad_norm;
    row.step_ms = m.seconds * 1e3;
    row.tokens_per_s = tokens_per_s;
    row.allreduce_calls = m.averaging.calls;
    row.allreduce_bytes = m.averaging.bytes;
    row.allgather_calls = m.averaging.gather_calls;
    row.allgather_bytes = m.averaging.gather_bytes;
    row.muon_exchange_calls = m.averaging.exchange_calls;
    row.muon_exchange_bytes = m.averaging.exchange_bytes;
    row.wall_time_s = wall_seconds;
    row.averaging_ms = m.averaging.seconds * 1e3;
    row.time_left_s = left;
    row.memory_bytes = memory;
    row.model_flops_per_s = model_flops_per_s;
    row.mfu = mfu;
    if (history_) history_->append(row);
    if (events_) {
      events_->add(step, step_scalars(row, peak_flops_ > 0));
    }
  }
  if (!force_line && step != 1 && step % train_.log_every != 0) return;
  flush_events();
  const parallel::AveragingCounters& a = m.averaging;
  log_.line("step:" + std::to_string(step) + "/" + std::to_string(train_.iterations) + " train_loss:" +
            fixed(m.loss, 4) + " lr:" + significant(lr(model::ParamGroup::matrix)) + " step_ms:" +
            fixed(m.seconds * 1e3, 1) + " tok/s:" + fixed(tokens_per_s, 0) + " allreduce_calls:" +
            std::to_string(a.calls) + " allreduce_bytes:" + std::to_string(a.bytes) + " allreduce_ms:" +
            fixed(a.seconds * 1e3, 1) +
            (a.gather_calls > 0 ? " allgather_calls:" + std::to_string(a.gather_calls) + " allgather_bytes:" +
                                      std::to_string(a.gather_bytes) + " allgather_ms:" + fixed(a.gather_seconds * 1e3, 1)
                                : "") +
            (a.exchange_calls > 0 ? " muon_exchange_calls:" + std::to_string(a.exchange_calls) + " muon_exchange_bytes:" +
                                        std::to_string(a.exchange_bytes) + " muon_exchange_ms:" +
                                        fixed(a.exchange_seconds * 1e3, 1)
                                  : "") +
            (a.calls_before_last_micro_step > 0
                 ? " allreduce_calls_before_last_micro_step:" + std::to_string(a.calls_before_last_micro_step)
                 : "") +
            (peak_flops_ > 0 ? " mfu:" + fixed(mfu, 4) : "") + " time_left_s:" + fixed(left, 0));
}

void ProgressReport::evaluation(int step, const inference::Evaluation& e, const std::string& weights) {
  log_.line("step:" + std::to_string(step) + "/" + std::to_string(train_.iterations) + " val_loss:" + fixed(e.loss, 4) +
            " val_bpb:" + fixed(e.bpb, 4) + " eval_s:" + fixed(e.seconds, 2) +
            (weights.empty() ? "" : " weights:" + weights));
  if (history_) history_->append(io::ValRow{step, e.loss, e.bpb});
  if (events_) {
    events_->add(step, {{"val/loss", e.loss}, {"val/bpb", e.bpb}});
    flush_events();
  }
}

void ProgressReport::task(int step, int index, const inference::TaskResult& t, const std::string& weights) {
  log_.line("step:" + std::to_string(step) + "/" + std::to_string(train_.iterations) + " task:" + t.name +
            " examples:" + std::to_string(t.examples) + " acc:" + fixed(t.acc, 4) + " acc_norm:" + fixed(t.acc_norm, 4) +
            " task_s:" + fixed(t.seconds, 2) + (weights.empty() ? "" : " weights:" + weights));
  if (history_) {
    history_->append(io::TaskRow{step, index, static_cast<std::int64_t>(t.examples), t.acc, t.acc_norm});
  }
  if (events_) {
    const std::string name = static_cast<std::size_t>(index) < task_names_.size() ? task_names_[index] : t.name;
    events_->add(step, {{"task/" + name + "/acc", t.acc}, {"task/" + name + "/acc_norm", t.acc_norm}});
    flush_events();
  }
}

}  // namespace kgpt::train
