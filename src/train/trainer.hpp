#pragma once
// The training loop on one rank, as nanoGPT and parameter-golf write it: for each optimizer step,
// grad_accum_steps micro-batches of forward and backward with the loss scaled by 1/grad_accum,
// then clipping, the schedule, and one optimizer step; evaluation on the val split at step 0,
// every train.eval_every steps and at the end.

#include <string>

#include "config/deck.hpp"
#include "io/run_log.hpp"

namespace kgpt::train {

struct TrainSummary {
  int steps = 0;
  double final_train_loss = 0.0;
  double final_val_loss = 0.0;
  double final_val_bpb = 0.0;
};

// Trains the deck's model, writing progress lines to `log`. Throws Error on a non-finite loss.
TrainSummary run_training(const config::ResolvedDeck& deck, io::RunLog& log);

}  // namespace kgpt::train
