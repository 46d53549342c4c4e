#pragma once
// What a training run tells the world about each step and evaluation: one history row per step
// and TensorBoard event per step (rank 0, when the run has a directory) and a log line every
// train.log_every steps, all made from the same StepMetrics. The events are flushed with each log
// line and evaluation, so a board follows the run at the log's pace.
// The time left is training time: the median of the last 101 steps' times the steps left, or what
// the wall-clock cap (train.max_wallclock_seconds) leaves where that is less.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/event_file.hpp"
#include "io/history.hpp"
#include "io/run_log.hpp"
#include "optim/optimizer.hpp"
#include "inference/evaluator.hpp"
#include "inference/tasks.hpp"
#include "train/step.hpp"

namespace kgpt::train {

// The dense peak FLOP/s that MFU divides model FLOP/s by, for the log, the history and `kgpt bench`:
// an H100's or H200's (SXM) bf16 tensor cores, 989.4 TFLOP/s, for bf16 decks on a GPU build; 0 where
// no peak is known (CPU builds, fp32 decks), which reports no MFU.
double mfu_peak_flops(const config::ModelConfig& model);

// A step's scalars in the event files: the history's columns of the same names under train/ (the
// counters of calls and bytes stay in the history), mfu where a peak is known.
std::vector<io::Scalar> step_scalars(const io::TrainRow& row, bool with_mfu);

class ProgressReport {
 public:
  // `history` and `events` may be null (ranks other than 0, runs without a directory, run.tensorboard
  // off). `task_names` name data.task_files' tasks in the events' tags (task/<name>/acc).
  ProgressReport(io::RunLog& log, io::History* history, io::EventFile* events, const config::Config& config,
                 const optim::Optimizer<float>& optimizer, std::vector<std::string> task_names);

  // Step `step` (counted from 1) is done; `tokens` counts every training token so far, all ranks;
  // `wall_seconds` is the time since the run (or its resumption) started; `training_seconds` the
  // training time of the whole run, as the wall-clock cap counts it. `force_line` prints the log
  // line whatever train.log_every says (the last step, a wall-clock stop).
  void step(int step, const StepMetrics& metrics, std::int64_t tokens, double wall_seconds, double training_seconds,
            bool force_line);
  // `weights`: "" for the live weights of a run that evaluates no average, else the weights scored
  // (live, ema, swa), which the log line names.
  void evaluation(int step, const inference::Evaluation& evaluation, const std::string& weights = "");
  // Task `index` of data.task_files scored at `step`, with `weights` as evaluation's.
  void task(int step, int index, const inference::TaskResult& result, const std::string& weights = "");

 private:
  double time_left(int step, double step_seconds, double training_seconds);
  void flush_events();

  io::RunLog& log_;
  io::History* history_;
  io::EventFile* events_;
  config::TrainConfig train_;
  const optim::Optimizer<float>& optimizer_;
  std::vector<std::string> task_names_;
  double flops_per_token_ = 0;
  double peak_flops_ = 0;     // 0: unknown, mfu is NaN
  std::deque<double> recent_step_seconds_;
};

}  // namespace kgpt::train
