#pragma once
// The training loop, as nanoGPT and parameter-golf write it with DDP: for each optimizer step,
// grad_accum_steps micro-batches of forward and backward on this rank's slice with the loss scaled
// by 1/grad_accum, gradient averaging across ranks during and after the last micro-step's
// backward, then clipping, the schedule, and one optimizer step; evaluation on the val split at
// step 0, every train.eval_every steps and at the end; the multiple-choice tasks of data.task_files
// every train.task_eval_every steps and at the end. Runs on every rank of MPI_COMM_WORLD.

#include <string>
#include <vector>

#include "config/deck.hpp"
#include "io/run_log.hpp"

namespace kgpt::inference {
struct InitWeights;
struct Task;
}

namespace kgpt::train {

struct StepRecord {
  double train_loss = 0.0;  // mean over ranks and micro-steps
  double grad_norm = 0.0;   // of the averaged gradient, before clipping
  long long allreduce_calls = 0, allreduce_bytes = 0, allreduce_calls_before_last_micro_step = 0;
  long long allgather_calls = 0, allgather_bytes = 0;  // parallel.zero_stage: 1's parameter all-gather
};

struct TrainOptions {
  std::string run_dir;  // where history.h5 and checkpoints/ go; "" writes neither
  bool resume = false;  // continue from the newest valid checkpoint in run_dir
  std::vector<float>* final_parameters = nullptr;  // receives this rank's parameters at the end
  // model.init_from's weights when the caller has read and checked them already (kgpt train does,
  // before it makes the run directory); taken over by the run. Otherwise the run reads them.
  inference::InitWeights* init_weights = nullptr;
  // data.task_files read and tokenized (kgpt train does, before it makes the run directory); when
  // null, the run reads them.
  const std::vector<inference::Task>* tasks = nullptr;
};

struct TrainSummary {
  int steps = 0;
  bool preempted = false;  // stopped by SIGUSR1/SIGTERM after a checkpoint
  std::vector<StepRecord> history;  // one per optimizer step
  double final_train_loss = 0.0;
  double final_val_loss = 0.0;
  double final_val_bpb = 0.0;
};

// Trains the deck's model, writing progress lines to `log` and, on rank 0, history.h5 and
// checkpoints into options.run_dir. Throws Error on a non-finite loss (no checkpoint is written
// for that step). SIGUSR1 and SIGTERM stop the run at the next step boundary with a checkpoint.
TrainSummary run_training(const config::ResolvedDeck& deck, io::RunLog& log, const TrainOptions& options = {});

}  // namespace kgpt::train
