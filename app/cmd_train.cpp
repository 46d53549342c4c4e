// kgpt train: validate the deck and its data, set up the run directory, train.

#include <iostream>

#include "commands.hpp"
#include "config/deck.hpp"
#include "core/build_info.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/dataset_check.hpp"
#include "io/run_directory.hpp"
#include "io/run_log.hpp"
#include "parallel/world.hpp"
#include "train/trainer.hpp"

namespace kgpt::app {

const CommandSpec& train_spec() {
  static const CommandSpec spec{
      "train",
      "DECK [--set section.key=value]... [--run-dir DIR]",
      "train a model from a deck",
      "Validates DECK and its data exactly as `kgpt check` does, then creates the run directory\n"
      "(--run-dir, or <run.out_dir>/<run.name>, where run.name defaults to the deck's file name)\n"
      "holding deck.yaml (the resolved deck), deck.source.yaml (the deck as given) and log.txt (the\n"
      "log, the same lines as stdout). An existing run directory is never overwritten.\n"
      "Then it trains (golf or gpt2 family, fp32) and evaluates on the val split at step 0, every\n"
      "train.eval_every steps and at the end. Under mpiexec or srun every rank takes its own slice\n"
      "of each micro-batch and gradients are averaged after the last micro-step (NCCL in CUDA\n"
      "builds, MPI otherwise); rank 0 alone writes. Log lines:\n"
      "  step:S/N train_loss:L lr:X step_ms:T tok/s:R allreduce_calls:C allreduce_bytes:B allreduce_ms:A\n"
      "  step:S/N val_loss:L val_bpb:B\n"
      "Rank 0 also appends every step to <run dir>/history.h5 (readable with h5py while the run goes\n"
      "on) and writes checkpoints to <run dir>/checkpoints/ every run.checkpoint_every steps and at the\n"
      "end. --resume continues the run in the run directory from its newest valid checkpoint.\n"
      "SIGUSR1 or SIGTERM: checkpoint at the next step, then exit code 3 (requeue and --resume).",
      {
          {"set", "section.key=value", "override a deck key (repeatable; validated like the deck)"},
          {"run-dir", "DIR", "run directory to create (default <run.out_dir>/<run.name>)"},
          {"resume", "", "continue the run in the run directory from its newest valid checkpoint"},
      },
      1,
      1};
  return spec;
}

int run_train(const ParsedArgs& args) {
  const parallel::WorldInfo& w = parallel::world();
  config::ResolvedDeck deck;
  data::DatasetFiles files;
  std::string dir;
  io::RunLog log;
  const bool resume = args.has("resume");
  // Every rank reads the deck and checks the data; only rank 0 makes the run directory and logs.
  parallel::agreed([&] {
    deck = load_deck_from_args(args, w.size);
    files = data::check_dataset(deck);
    dir = io::run_directory_path(deck, args.get("run-dir"));
    if (w.rank == 0) {
      if (resume) {
        io::require_run_directory(dir);
      } else {
        io::create_run_directory(dir);
        io::write_resolved_deck(dir, deck);
      }
      log = io::RunLog(dir);
    }
  });
  const config::ModelConfig& m = deck.config.model;
  const config::BatchPlan& p = deck.plan;
  log.line(std::string("kgpt ") + build_info::version() + " (git " + build_info::git_sha() + ")");
  log.line("run_dir:" + dir + " deck:" + deck.path);
  log.line("model:" + m.family + " layers:" + std::to_string(m.n_layer) + " d_model:" + std::to_string(m.d_model) +
           " heads:" + std::to_string(m.n_head) + " kv_heads:" + std::to_string(m.n_kv_head) +
           " vocab:" + std::to_string(m.vocab_size));
  log.line("tokens_per_step:" + std::to_string(deck.config.train.global_batch_tokens) +
           " world_size:" + std::to_string(p.world_size) + " grad_accum_steps:" + std::to_string(p.grad_accum_steps) +
           " micro_batch:" + std::to_string(p.local_sequences) + "x" + std::to_string(p.seq_len) +
           " ranks_per_node:" + std::to_string(w.local_size));
  log.line("train_shards:" + std::to_string(files.train.files.size()) + " train_tokens:" +
           std::to_string(files.train.tokens) + " val_shards:" + std::to_string(files.val.files.size()) +
           " val_tokens:" + std::to_string(files.val.tokens));
  train::TrainOptions options;
  options.run_dir = dir;
  options.resume = resume;
  const train::TrainSummary summary = train::run_training(deck, log, options);
  if (summary.preempted) return static_cast<int>(ExitCode::preempted);
  log.line("done steps:" + std::to_string(summary.steps) + " run_dir:" + dir);
  return 0;
}

}  // namespace kgpt::app
