#include "train/progress.hpp"

#include "core/text.hpp"

namespace kgpt::train {

using text::fixed;
using text::significant;

ProgressReport::ProgressReport(io::RunLog& log, io::History* history, const config::TrainConfig& train,
                               const optim::Optimizer<float>& optimizer)
    : log_(log), history_(history), train_(train), optimizer_(optimizer) {}

void ProgressReport::step(int step, const StepMetrics& m, std::int64_t tokens, double wall_seconds, bool force_line) {
  const double tokens_per_s = static_cast<double>(train_.global_batch_tokens) / m.seconds;
  auto lr = [&](model::ParamGroup group) { return optimizer_.group_lr(group) * m.lr_multiplier; };
  if (history_) {
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
    history_->append(row);
  }
  if (!force_line && step != 1 && step % train_.log_every != 0) return;
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
                 : ""));
}

void ProgressReport::evaluation(int step, const inference::Evaluation& e, const std::string& weights) {
  log_.line("step:" + std::to_string(step) + "/" + std::to_string(train_.iterations) + " val_loss:" + fixed(e.loss, 4) +
            " val_bpb:" + fixed(e.bpb, 4) + " eval_s:" + fixed(e.seconds, 2) +
            (weights.empty() ? "" : " weights:" + weights));
  if (history_) history_->append(io::ValRow{step, e.loss, e.bpb});
}

void ProgressReport::task(int step, int index, const inference::TaskResult& t, const std::string& weights) {
  log_.line("step:" + std::to_string(step) + "/" + std::to_string(train_.iterations) + " task:" + t.name +
            " examples:" + std::to_string(t.examples) + " acc:" + fixed(t.acc, 4) + " acc_norm:" + fixed(t.acc_norm, 4) +
            " task_s:" + fixed(t.seconds, 2) + (weights.empty() ? "" : " weights:" + weights));
  if (history_) {
    history_->append(io::TaskRow{step, index, static_cast<std::int64_t>(t.examples), t.acc, t.acc_norm});
  }
}

}  // namespace kgpt::train
