#pragma once
// What a training run tells the world about each step and evaluation: one history row per step
// (rank 0, when the run has a history) and a log line every train.log_every steps, both made from
// the same StepMetrics.

#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "io/history.hpp"
#include "io/run_log.hpp"
#include "optim/optimizer.hpp"
#include "inference/evaluator.hpp"
#include "inference/tasks.hpp"
#include "train/step.hpp"

namespace kgpt::train {

class ProgressReport {
 public:
  // `history` may be null (ranks other than 0, runs without a directory).
  ProgressReport(io::RunLog& log, io::History* history, const config::TrainConfig& train,
                 const optim::Optimizer<float>& optimizer);

  // Step `step` (counted from 1) is done; `tokens` counts every training token so far, all ranks;
  // `wall_seconds` is the time since the run (or its resumption) started. `force_line` prints the
  // log line whatever train.log_every says (the last step, a wall-clock stop).
  void step(int step, const StepMetrics& metrics, std::int64_t tokens, double wall_seconds, bool force_line);
  // `weights`: "" for the live weights of a run that evaluates no average, else the weights scored
  // (live, ema, swa), which the log line names.
  void evaluation(int step, const inference::Evaluation& evaluation, const std::string& weights = "");
  // Task `index` of data.task_files scored at `step`, with `weights` as evaluation's.
  void task(int step, int index, const inference::TaskResult& result, const std::string& weights = "");

 private:
  io::RunLog& log_;
  io::History* history_;
  config::TrainConfig train_;
  const optim::Optimizer<float>& optimizer_;
};

}  // namespace kgpt::train
