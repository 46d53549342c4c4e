// kgpt train: validate the deck and its data, set up the run directory, train.

#include <iostream>

#include "commands.hpp"
#include "config/deck.hpp"
#include "core/build_info.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/dataset_check.hpp"
#include "inference/hf.hpp"
#include "inference/tasks.hpp"
#include "io/run_directory.hpp"
#include "io/run_log.hpp"
#include "model/attention/attention.hpp"
#include "parallel/world.hpp"
#include "io/checkpoint.hpp"
#include "train/memory_plan.hpp"
#include "train/trainer.hpp"

namespace kgpt::app {

const CommandSpec& train_spec() {
  static const CommandSpec spec{
      "train",
      "DECK [--set section.key=value]... [--run-dir DIR | --run-suffix S] [--resume | --auto-resume]",
      "train a model from a deck",
      "Validates DECK and its data exactly as `kgpt check` does, then creates the run directory\n"
      "(--run-dir, or <run.out_dir>/<run.name>, where run.name defaults to the deck's file name)\n"
      "holding deck.yaml (the resolved deck), deck.source.yaml (the deck as given) and log.txt (the\n"
      "log, the same lines as stdout). An existing run directory is never overwritten.\n"
      "Then it trains (model.family, train.precision) and evaluates on the val split at step 0, every\n"
      "train.eval_every steps and at the end. Under mpiexec or srun every rank takes its own slice\n"
      "of each micro-batch and gradients are averaged after the last micro-step (NCCL in CUDA\n"
      "builds, MPI otherwise); rank 0 alone writes. Log lines:\n"
      "  step:S/N train_loss:L lr:X step_ms:T tok/s:R allreduce_calls:C allreduce_bytes:B allreduce_ms:A\n"
      "  step:S/N val_loss:L val_bpb:B eval_s:E\n"
      "Rank 0 also appends every step to <run dir>/history.h5 (readable with h5py while the run goes\n"
      "on) and writes checkpoints to <run dir>/checkpoints/ every run.checkpoint_every steps and at the\n"
      "end. --resume continues the run in the run directory from its newest valid checkpoint.\n"
      "--auto-resume is for batch jobs that may be requeued: it resumes when the run directory holds\n"
      "a checkpoint, and otherwise starts the run there (again, if an attempt died before its first\n"
      "checkpoint); it refuses a run directory whose deck.yaml has other values than DECK.\n"
      "SIGUSR1 or SIGTERM: checkpoint at the next step, then exit code 3 (requeue and --resume).\n"
      "A stall watchdog (parallel.stall_timeout_s, default 600 s; 0 turns it off) ends the job with exit\n"
      "code 4 when its ranks make no progress for that long or one stops answering, naming the rank,\n"
      "step and phase on stderr and in log.txt. A failed write of a checkpoint or of history.h5 (disk\n"
      "full, quota, file size limit, read-only folder) is reported with the file and the system's\n"
      "reason and ends the job with exit code 1; no partial checkpoint is left behind.",
      {
          {"set", "section.key=value", "override a deck key (repeatable; validated like the deck)"},
          {"run-dir", "DIR", "run directory to create (default <run.out_dir>/<run.name>)"},
          {"run-suffix", "S", "append S to the default run directory's name (the batch scripts pass the job id)"},
          {"resume", "", "continue the run in the run directory from its newest valid checkpoint"},
          {"auto-resume", "", "resume if the run directory holds a checkpoint, else start there (batch jobs)"},
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
  train::MemoryPlan memory;
  inference::InitWeights init_weights;
  std::vector<inference::Task> tasks;
  const bool auto_resume = args.has("auto-resume");
  bool resume = args.has("resume");
  std::string restart_note;
  // Every rank reads the deck and checks the data; only rank 0 makes the run directory and logs.
  parallel::agreed([&] {
    if (auto_resume && resume) throw InputError("give --resume or --auto-resume, not both");
    deck = load_deck_from_args(args, w.size);
    memory = train::plan_memory(deck, model::this_build());
    train::require_fit(deck, memory, model::this_build());
    files = data::check_dataset(deck);
    // model.init_from's tensors against the model, before the run directory is made.
    if (!deck.config.model.init_from.empty() && !resume) init_weights = inference::read_init_weights(deck);
    tasks = inference::deck_tasks(deck);  // data.task_files, read and checked before anything is written
    dir = io::run_directory_path(deck, args.get("run-dir"), args.get("run-suffix"));
    if (w.rank == 0) {
      if (auto_resume && io::holds_run(dir)) {
        io::require_same_run(dir, deck);
        resume = !io::list_checkpoints(dir).empty();
        if (!resume) {
          restart_note = "restart: " + dir + " holds no checkpoint; starting the run again from step 0";
          io::write_resolved_deck(dir, deck);
        }
      } else if (resume) {
        io::require_run_directory(dir);
      } else {
        io::create_run_directory(dir);
        io::write_resolved_deck(dir, deck);
      }
      log = io::RunLog(dir);
    }
  });
  // Rank 0 alone looked at the run directory; every rank follows its choice.
  if (auto_resume) resume = parallel::any(w.rank == 0 && resume);
  if (!restart_note.empty()) log.line(restart_note);
  const config::ModelConfig& m = deck.config.model;
  const config::BatchPlan& p = deck.plan;
  log.line(std::string("kgpt ") + build_info::version() + " (git " + build_info::git_sha() + ")");
  log.line("run_dir:" + dir + " deck:" + deck.path);
  log.line("model:" + m.family + " layers:" + std::to_string(m.n_layer) + " d_model:" + std::to_string(m.d_model) +
           " heads:" + std::to_string(m.n_head) + " kv_heads:" + std::to_string(m.n_kv_head) +
           " vocab:" + std::to_string(m.vocab_size) +
           " attention:" + model::attention_name(m));
  log.line("tokens_per_step:" + std::to_string(deck.config.train.global_batch_tokens) +
           " world_size:" + std::to_string(p.world_size) + " grad_accum_steps:" + std::to_string(p.grad_accum_steps) +
           " micro_batch:" + std::to_string(p.local_sequences) + "x" + std::to_string(p.seq_len) +
           " ranks_per_node:" + std::to_string(w.local_size));
  log.line("placement: " + parallel::placement());
  for (const auto& note : deck.notes) log.line("note: " + note);
  log.line(train::log_line(memory));
  log.line("train_shards:" + std::to_string(files.train.files.size()) + " train_tokens:" +
           std::to_string(files.train.tokens) + " val_shards:" + std::to_string(files.val.files.size()) +
           " val_tokens:" + std::to_string(files.val.tokens));
  train::TrainOptions options;
  options.run_dir = dir;
  options.resume = resume;
  // Read and checked above; --auto-resume may have chosen to resume instead, which ignores them.
  if (!init_weights.file.empty()) options.init_weights = &init_weights;
  options.tasks = &tasks;
  train::TrainSummary summary;
  try {
    summary = train::run_training(deck, log, options);
  } catch (const std::exception& e) {
    // The message goes to stderr on the way out; log.txt keeps it beside the run's lines.
    log.record_error(*e.what() ? e.what() : "another rank failed; its message is on stderr");
    throw;
  }
  if (summary.preempted) return static_cast<int>(ExitCode::preempted);
  log.line("done steps:" + std::to_string(summary.steps) + " run_dir:" + dir);
  return 0;
}

}  // namespace kgpt::app
