#include "io/history.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/versions.hpp"

namespace kgpt::io {

namespace {

using Series = Hdf5File::SeriesType;

struct Column {
  const char* name;
  Series type;
  const char* units;
  const char* description;
};

const std::vector<Column>& train_columns() {
  static const std::vector<Column> columns = {
      {"step", Series::int64, "step", "optimizer step, counted from 1"},
      {"tokens", Series::int64, "tokens", "training tokens seen by all ranks up to and including this step"},
      {"loss", Series::float64, "nats/token", "train loss, mean over ranks and micro-steps"},
      {"lr_matrix", Series::float64, "1", "learning rate of the 2-D block matrices (schedule applied)"},
      {"lr_scalar", Series::float64, "1", "learning rate of vectors and scalars (schedule applied)"},
      {"lr_embedding", Series::float64, "1", "learning rate of the tied embedding (schedule applied)"},
      {"lr_head", Series::float64, "1", "learning rate of an untied head (schedule applied)"},
      {"grad_norm", Series::float64, "1", "global L2 norm of the averaged gradient, before clipping"},
      {"step_ms", Series::float64, "ms", "wall time of the step on the slowest rank"},
      {"tokens_per_s", Series::float64, "tokens/s", "training tokens of the step over its wall time"},
      {"allreduce_calls", Series::int64, "calls",
       "gradient averaging calls in the step (all-reduces; under parallel.zero_stage 1 reduces to each span's owner)"},
      {"allreduce_bytes", Series::int64, "bytes", "gradient bytes averaged in the step"},
      {"wall_time_s", Series::float64, "s", "seconds since the run (or its resumption) started"},
      {"allgather_calls", Series::int64, "calls", "parameter all-gather calls in the step (parallel.zero_stage 1)"},
      {"allgather_bytes", Series::int64, "bytes", "parameter bytes all-gathered in the step (parallel.zero_stage 1)"},
      {"muon_exchange_calls", Series::int64, "calls",
       "calls exchanging Muon's orthogonalised updates in the step (parallel.share_muon)"},
      {"muon_exchange_bytes", Series::int64, "bytes",
       "bytes of Muon's orthogonalised updates exchanged in the step (parallel.share_muon)"},
      {"averaging_ms", Series::float64, "ms", "time of the step's gradient averaging calls on rank 0 (their wait included)"},
      {"time_left_s", Series::float64, "s",
       "training time left: the median of the last 101 steps' times the steps left, or the wall-clock cap's "
       "time left where that is less (evaluations not included)"},
      {"memory_bytes", Series::float64, "bytes",
       "GPU builds: device memory in use on rank 0's GPU; CPU builds: rank 0's peak resident set"},
      {"model_flops_per_s", Series::float64, "FLOP/s", "the model family's FLOPs per token times tokens/s"},
      {"mfu", Series::float64, "1",
       "model_flops_per_s over the GPU's dense bf16 peak (H100/H200 SXM, 989.4 TFLOP/s) for bf16 decks on a GPU "
       "build; NaN otherwise"},
  };
  return columns;
}

const std::vector<Column>& val_columns() {
  static const std::vector<Column> columns = {
      {"step", Series::int64, "step", "optimizer steps done when evaluated"},
      {"loss", Series::float64, "nats/token", "val loss over the evaluated val tokens, all ranks"},
      {"bpb", Series::float64, "bits/byte", "val bits per byte of text (val_bpb)"},
  };
  return columns;
}

const std::vector<Column>& task_columns() {
  static const std::vector<Column> columns = {
      {"step", Series::int64, "step", "optimizer steps done when scored"},
      {"task", Series::int64, "index", "the task: a line of this group's attribute names (data.task_files)"},
      {"examples", Series::int64, "examples", "examples scored, all ranks"},
      {"acc", Series::float64, "1", "share of examples whose right ending has the largest log-likelihood"},
      {"acc_norm", Series::float64, "1", "share of examples whose right ending has the largest log-likelihood per character"},
  };
  return columns;
}

// The groups of a history and their columns.
const std::vector<std::pair<const char*, const std::vector<Column>*>>& groups() {
  static const std::vector<std::pair<const char*, const std::vector<Column>*>> all = {
      {"/train/", &train_columns()}, {"/val/", &val_columns()}, {"/task/", &task_columns()}};
  return all;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

void write_metadata(Hdf5File& file, const RunMetadata& metadata) {
  file.write_string("/metadata/deck", metadata.deck_text);
  const Versions& v = versions();
  const std::pair<const char*, std::string> texts[] = {
      {"kgpt_version", v.kgpt},
      {"git_sha", v.git_sha},
      {"kokkos_version", v.kokkos + " (" + v.kokkos_backends + ")"},
      {"mpi_version", v.mpi},
      {"hdf5_version", v.hdf5},
      {"nccl_version", v.nccl},
      {"cudnn_version", v.cudnn},
      {"slurm_job_id", environment("SLURM_JOB_ID")},
      {"slurm_array_job_id", environment("SLURM_ARRAY_JOB_ID")},
      {"slurm_array_task_id", environment("SLURM_ARRAY_TASK_ID")},
      {"deck_path", metadata.deck_path},
      {"run_dir", metadata.run_dir},
      {"init_from", metadata.init_from},
      {"init_from_fnv1a64", metadata.init_from_checksum},
  };
  for (const auto& [key, value] : texts) file.set_attribute("/metadata", key, value);
  file.set_attribute("/metadata", "world_size", static_cast<std::int64_t>(metadata.world_size));
  file.set_attribute("/metadata", "iterations", metadata.iterations);
}

History::History(std::unique_ptr<Hdf5File> file) : file_(std::move(file)) {}

History History::create(const std::string& path, const RunMetadata& metadata) {
  auto file = std::make_unique<Hdf5File>(path, Hdf5File::Mode::create);
  write_metadata(*file, metadata);
  for (const auto& [group, columns] : groups()) {
    for (const Column& column : *columns) {
      const std::string name = std::string(group) + column.name;
      file->create_series(name, column.type);
      file->set_attribute(name, "units", std::string(column.units));
      file->set_attribute(name, "description", std::string(column.description));
    }
  }
  std::string names;
  for (const std::string& task : metadata.task_names) names += (names.empty() ? "" : "\n") + task;
  file->set_attribute("/task", "names", names);
  file->flush();
  file->start_swmr();
  return History(std::move(file));
}

History History::resume(const std::string& path, std::int64_t last_step, const RunMetadata& metadata) {
  std::map<std::string, std::vector<double>> kept;  // by "/group/column"
  std::size_t train_rows = 0, val_rows = 0, task_rows = 0;
  {
    const Hdf5File old(path, Hdf5File::Mode::read);
    for (const auto& [group, columns] : groups()) {
      const bool train = std::string(group) == "/train/";
      // A history of an older kgpt has no /task: no rows. Without /train or /val it is no history.
      const std::string steps_name = std::string(group) + "step";
      const bool optional = std::string(group) == "/task/";
      const std::vector<double> steps =
          optional && !old.contains(steps_name) ? std::vector<double>() : old.read_doubles(steps_name);
      std::size_t keep = 0;
      // The resumed run evaluates and scores its first step again.
      while (keep < steps.size() &&
             (train ? steps[keep] <= static_cast<double>(last_step) : steps[keep] < static_cast<double>(last_step))) {
        ++keep;
      }
      std::size_t kept_rows = keep;
      for (const Column& column : *columns) {
        // A column that an older kgpt did not write reads as zeros.
        const std::string name = std::string(group) + column.name;
        std::vector<double> values = old.contains(name) ? old.read_doubles(name) : std::vector<double>(keep, 0.0);
        values.resize(std::min(keep, values.size()));
        kept_rows = std::min(kept_rows, values.size());
        kept[std::string(group) + column.name] = std::move(values);
      }
      // A writer killed inside a row leaves its later columns one short: that row is dropped.
      (train ? train_rows : std::string(group) == "/val/" ? val_rows : task_rows) = kept_rows;
    }
  }
  const std::string temporary = path + ".tmp";
  {
    History fresh = create(temporary, metadata);
    auto at = [&kept](const char* name, std::size_t i) { return kept.at(name).at(i); };
    auto whole = [&at, &path](const char* name, std::size_t i) {
      return whole_number(at(name, i), path + ": " + name + " row " + std::to_string(i));
    };
    for (std::size_t i = 0; i < train_rows; ++i) {
      TrainRow row;
      row.step = whole("/train/step", i);
      row.tokens = whole("/train/tokens", i);
      row.loss = at("/train/loss", i);
      row.lr_matrix = at("/train/lr_matrix", i);
      row.lr_scalar = at("/train/lr_scalar", i);
      row.lr_embedding = at("/train/lr_embedding", i);
      row.lr_head = at("/train/lr_head", i);
      row.grad_norm = at("/train/grad_norm", i);
      row.step_ms = at("/train/step_ms", i);
      row.tokens_per_s = at("/train/tokens_per_s", i);
      row.allreduce_calls = whole("/train/allreduce_calls", i);
      row.allreduce_bytes = whole("/train/allreduce_bytes", i);
      row.wall_time_s = at("/train/wall_time_s", i);
      row.allgather_calls = whole("/train/allgather_calls", i);
      row.allgather_bytes = whole("/train/allgather_bytes", i);
      row.muon_exchange_calls = whole("/train/muon_exchange_calls", i);
      row.muon_exchange_bytes = whole("/train/muon_exchange_bytes", i);
      row.averaging_ms = at("/train/averaging_ms", i);
      row.time_left_s = at("/train/time_left_s", i);
      row.memory_bytes = at("/train/memory_bytes", i);
      row.model_flops_per_s = at("/train/model_flops_per_s", i);
      row.mfu = at("/train/mfu", i);
      fresh.append(row);
    }
    for (std::size_t i = 0; i < val_rows; ++i) {
      fresh.append(ValRow{whole("/val/step", i), at("/val/loss", i), at("/val/bpb", i)});
    }
    for (std::size_t i = 0; i < task_rows; ++i) {
      fresh.append(TaskRow{whole("/task/step", i), whole("/task/task", i), whole("/task/examples", i), at("/task/acc", i),
                           at("/task/acc_norm", i)});
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    throw Error(ExitCode::failure, temporary + ": cannot rename to " + path);
  }
  auto file = std::make_unique<Hdf5File>(path, Hdf5File::Mode::append);
  file->start_swmr();
  return History(std::move(file));
}

void History::append(const TrainRow& row) {
  Hdf5File& f = *file_;
  f.append("/train/step", row.step);
  f.append("/train/tokens", row.tokens);
  f.append("/train/loss", row.loss);
  f.append("/train/lr_matrix", row.lr_matrix);
  f.append("/train/lr_scalar", row.lr_scalar);
  f.append("/train/lr_embedding", row.lr_embedding);
  f.append("/train/lr_head", row.lr_head);
  f.append("/train/grad_norm", row.grad_norm);
  f.append("/train/step_ms", row.step_ms);
  f.append("/train/tokens_per_s", row.tokens_per_s);
  f.append("/train/allreduce_calls", row.allreduce_calls);
  f.append("/train/allreduce_bytes", row.allreduce_bytes);
  f.append("/train/wall_time_s", row.wall_time_s);
  f.append("/train/allgather_calls", row.allgather_calls);
  f.append("/train/allgather_bytes", row.allgather_bytes);
  f.append("/train/muon_exchange_calls", row.muon_exchange_calls);
  f.append("/train/muon_exchange_bytes", row.muon_exchange_bytes);
  f.append("/train/averaging_ms", row.averaging_ms);
  f.append("/train/time_left_s", row.time_left_s);
  f.append("/train/memory_bytes", row.memory_bytes);
  f.append("/train/model_flops_per_s", row.model_flops_per_s);
  f.append("/train/mfu", row.mfu);
}

void History::append(const ValRow& row) {
  file_->append("/val/step", row.step);
  file_->append("/val/loss", row.loss);
  file_->append("/val/bpb", row.bpb);
}

void History::append(const TaskRow& row) {
  file_->append("/task/step", row.step);
  file_->append("/task/task", row.task);
  file_->append("/task/examples", row.examples);
  file_->append("/task/acc", row.acc);
  file_->append("/task/acc_norm", row.acc_norm);
}

}  // namespace kgpt::io
