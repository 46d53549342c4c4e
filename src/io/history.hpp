#pragma once
// history.h5 of a run directory: one row per optimizer step in /train, one per evaluation in /val
// and one per task and scoring in /task (data.task_files; its attribute names lists the tasks,
// one a line, in the numbering of its task column), each column an extendible dataset with its units and meaning as attributes, and
// /metadata (the resolved deck text, versions, world size, Slurm job ids). Every append is flushed
// and the file is written in SWMR mode, so h5py can read it while the run goes on
// (h5py.File(path, "r", swmr=True)) and a crash loses at most the row being written.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace kgpt::io {

struct TrainRow {
  std::int64_t step = 0, tokens = 0;
  double loss = 0, lr_matrix = 0, lr_scalar = 0, lr_embedding = 0, lr_head = 0, grad_norm = 0;
  double step_ms = 0, tokens_per_s = 0;
  std::int64_t allreduce_calls = 0, allreduce_bytes = 0;
  double wall_time_s = 0;
  std::int64_t allgather_calls = 0, allgather_bytes = 0;
  std::int64_t muon_exchange_calls = 0, muon_exchange_bytes = 0;
  double averaging_ms = 0;       // the step's time in gradient averaging calls (all-reduces or reduces)
  double time_left_s = 0;        // train/progress.hpp: until train.iterations or the wall-clock cap
  double memory_bytes = 0;       // device memory in use (GPU builds) or peak resident set (CPU builds)
  double model_flops_per_s = 0;  // the model family's FLOPs per token times tokens/s
  double mfu = 0;                // model_flops_per_s over the device's peak; NaN where no peak is known
};

struct ValRow {
  std::int64_t step = 0;
  double loss = 0, bpb = 0;
};

// One task's scores at one step (data.task_files): `task` indexes /task's names attribute.
struct TaskRow {
  std::int64_t step = 0, task = 0, examples = 0;
  double acc = 0, acc_norm = 0;
};

// What a history and a checkpoint say about the run that made them.
struct RunMetadata {
  std::string deck_text;  // the resolved deck
  std::string deck_path, run_dir;
  int world_size = 1;
  std::string init_from, init_from_checksum;  // model.init_from's file and its FNV-1a 64, or ""
  std::vector<std::string> task_names;        // the tasks of data.task_files, in TaskRow's numbering
  std::int64_t iterations = 0;                // train.iterations: the step the run ends at
};

// Writes /metadata (deck text, versions, world size, Slurm job ids) into `file`.
void write_metadata(Hdf5File& file, const RunMetadata& metadata);

class History {
 public:
  // A new history at `path` (an existing file is replaced).
  static History create(const std::string& path, const RunMetadata& metadata);
  // A resumed run's history: the rows of the history at `path` for train steps <= `last_step` and
  // val steps < `last_step` (the resumed run evaluates its first step again), so no step appears
  // twice, under `metadata` of the resumed run. The file is rewritten through a temporary file and
  // a rename, since one whose writer was killed can only be read.
  static History resume(const std::string& path, std::int64_t last_step, const RunMetadata& metadata);

  void append(const TrainRow& row);
  void append(const ValRow& row);
  void append(const TaskRow& row);
  const std::string& path() const { return file_->path(); }

 private:
  explicit History(std::unique_ptr<Hdf5File> file);
  std::unique_ptr<Hdf5File> file_;
};

}  // namespace kgpt::io
