#include "io/describe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/artifact.hpp"
#include "io/checkpoint.hpp"
#include "io/event_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_directory.hpp"

namespace kgpt::io {

namespace {

using text::fixed;
using text::significant;

void print_metadata(const Hdf5File& file, std::ostream& out) {
  if (!file.contains("/metadata")) return;
  // Older files lack some of these, and files not written by kgpt any of them: those lines are left
  // out. One that is there but cannot be read is a corrupted file, and says so.
  for (const char* key : {"kgpt_version", "git_sha", "kokkos_version", "mpi_version", "hdf5_version", "nccl_version",
                          "deck_path", "run_dir", "slurm_job_id"}) {
    if (!file.has_attribute("/metadata", key)) continue;
    const std::string value = file.read_attribute_string("/metadata", key);
    if (!value.empty()) out << "  " << key << ": " << value << "\n";
  }
  if (file.has_attribute("/metadata", "world_size")) {
    out << "  world_size: " << file.read_attribute_whole("/metadata", "world_size") << "\n";
  }
}

void inspect_checkpoint(const Hdf5File& file, std::ostream& out) {
  out << file.path() << ": kgpt checkpoint\n";
  for (const char* key : {"step", "tokens_seen", "stream_position", "training_seconds", "seed"}) {
    const std::string name = std::string("/state/") + key;
    if (file.contains(name)) out << "  " << key << ": " << significant(file.read_scalar(name)) << "\n";
  }
  print_metadata(file, out);
  std::size_t count = 0;
  const auto tensors = file.members("/params");
  out << "  tensors: " << tensors.size() << "\n";
  for (const auto& name : tensors) {
    const std::string path = "/params/" + name;
    const auto values = file.read_doubles(path);
    const double norm = std::sqrt(std::inner_product(values.begin(), values.end(), values.begin(), 0.0));
    count += values.size();
    out << "    " << name << " " << text::shape(file.shape(path)) << " " << file.dtype(path)
        << " norm:" << significant(norm) << "\n";
  }
  out << "  parameters: " << count << "\n";
  if (file.contains("/optim")) {
    out << "  optimizer state:";
    for (const auto& group : file.members("/optim")) out << " " << group;
    out << "\n";
  }
}

void inspect_artifact(const std::string& path, std::ostream& out) {
  const Artifact artifact = read_artifact(path);
  std::size_t bytes = 0;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    bytes = static_cast<std::size_t>(in.tellg());
  }
  out << path << ": kgpt artifact (" << config::name_of(artifact.compression) << ")\n"
      << "  step: " << artifact.step << "\n"
      << "  bytes: " << bytes << "\n";
  for (const auto& [key, value] : artifact.metadata) {
    if (!value.empty()) out << "  " << key << ": " << value << "\n";
  }
  std::size_t count = 0, stored = 0;
  out << "  tensors: " << artifact.tensors.size() << "\n";
  for (const auto& t : artifact.tensors) {
    const auto values = t.dequantized();
    const double norm = std::sqrt(std::inner_product(values.begin(), values.end(), values.begin(), 0.0));
    count += values.size();
    stored += t.stored_bytes();
    out << "    " << t.name << " " << text::shape(t.shape) << " " << t.storage_label()
        << " norm:" << significant(norm) << "\n";
  }
  out << "  parameters: " << count << "\n"
      << "  stored bytes before compression: " << stored << " (" << count * 4 << " in fp32)\n";
}

// "1h02m03s", "4m05s", "6s": a time left as people read it.
std::string hours_minutes_seconds(double seconds) {
  const long long whole = seconds > 0 && std::isfinite(seconds) ? static_cast<long long>(seconds + 0.5) : 0;
  char text[48];
  if (whole >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm%02llds", whole / 3600, whole / 60 % 60, whole % 60);
  } else if (whole >= 60) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", whole / 60, whole % 60);
  } else {
    std::snprintf(text, sizeof(text), "%llds", whole);
  }
  return text;
}

// Where a run stands by its history's last row: the step of how many, the time left (histories
// before kgpt recorded it have neither) and the step's figures. The row is the last one that every
// column printed holds: a running job's writer may be inside a row, its later columns one short.
void print_progress(const Hdf5File& file, std::ostream& out) {
  std::map<std::string, std::vector<double>> columns;
  std::size_t rows = std::numeric_limits<std::size_t>::max();
  for (const char* name : {"step", "loss", "step_ms", "tokens_per_s", "grad_norm", "lr_matrix", "time_left_s", "mfu",
                           "memory_bytes"}) {
    const std::string path = std::string("/train/") + name;
    if (!file.contains(path)) continue;
    std::vector<double>& values = columns[name] = file.read_doubles(path);
    rows = std::min(rows, values.size());
  }
  if (columns.count("step") == 0 || rows == 0) return;
  auto last = [&](const char* column) {
    const auto found = columns.find(column);
    return found == columns.end() ? std::numeric_limits<double>::quiet_NaN() : found->second[rows - 1];
  };
  const double step = last("step");
  out << "  progress: step " << significant(step);
  if (file.has_attribute("/metadata", "iterations")) {
    const auto iterations = static_cast<double>(file.read_attribute_whole("/metadata", "iterations"));
    out << "/" << significant(iterations) << " (" << fixed(iterations > 0 ? 100.0 * step / iterations : 0.0, 1) << "%)";
    if (step >= iterations) out << ", finished";
  }
  const double left = last("time_left_s");
  if (std::isfinite(left) && left > 0) out << ", time left " << hours_minutes_seconds(left);
  out << "\n  last step: train_loss " << significant(last("loss")) << ", step_ms " << fixed(last("step_ms"), 1)
      << ", tok/s " << fixed(last("tokens_per_s"), 0) << ", grad_norm " << significant(last("grad_norm")) << ", lr "
      << significant(last("lr_matrix"));
  const double mfu = last("mfu");
  if (std::isfinite(mfu) && mfu > 0) out << ", mfu " << fixed(mfu, 4);
  const double memory = last("memory_bytes");
  if (std::isfinite(memory) && memory > 0) out << ", memory " << fixed(memory / (1024.0 * 1024.0), 0) << " MiB";
  out << "\n";
}

void inspect_history(const Hdf5File& file, std::ostream& out) {
  out << file.path() << ": kgpt history\n";
  print_metadata(file, out);
  // A writer stopped inside a row leaves the later columns one short: rows are those all columns hold.
  const auto steps = file.read_doubles("/train/step");
  const auto losses = file.read_doubles("/train/loss");
  auto speeds = file.read_doubles("/train/tokens_per_s");
  const auto tokens = file.read_doubles("/train/tokens");
  const std::size_t rows = std::min({steps.size(), losses.size(), speeds.size(), tokens.size()});
  out << "  train rows: " << rows;
  if (rows > 0) {
    speeds.resize(rows);
    std::nth_element(speeds.begin(), speeds.begin() + rows / 2, speeds.end());
    out << " (steps " << significant(steps.front()) << "-" << significant(steps[rows - 1]) << ")"
        << ", last train loss " << significant(losses[rows - 1]) << ", median tokens/s " << significant(speeds[rows / 2])
        << ", tokens " << significant(tokens[rows - 1]);
  }
  out << "\n";
  print_progress(file, out);
  const auto val_steps = file.read_doubles("/val/step");
  const auto val_losses = file.read_doubles("/val/loss");
  const auto val_bpb = file.read_doubles("/val/bpb");
  const std::size_t val_rows = std::min({val_steps.size(), val_losses.size(), val_bpb.size()});
  out << "  val rows: " << val_rows;
  if (val_rows > 0) {
    const auto end = val_losses.begin() + static_cast<std::ptrdiff_t>(val_rows);
    const auto best = static_cast<std::size_t>(std::min_element(val_losses.begin(), end) - val_losses.begin());
    out << ", last val_loss " << significant(val_losses[val_rows - 1]) << " val_bpb " << significant(val_bpb[val_rows - 1])
        << " (step " << significant(val_steps[val_rows - 1]) << "), best val_loss " << significant(val_losses[best])
        << " (step " << significant(val_steps[best]) << ")";
  }
  out << "\n";
  // The multiple-choice tasks (data.task_files), in a history that has them: each task's last scores.
  if (!file.contains("/task/step")) return;
  const auto task_steps = file.read_doubles("/task/step");
  const auto task_index = file.read_doubles("/task/task");
  const auto acc = file.read_doubles("/task/acc");
  const auto acc_norm = file.read_doubles("/task/acc_norm");
  const std::size_t task_rows = std::min({task_steps.size(), task_index.size(), acc.size(), acc_norm.size()});
  std::vector<std::string> names;
  if (file.has_attribute("/task", "names")) {
    std::istringstream listed(file.read_attribute_string("/task", "names"));
    for (std::string name; std::getline(listed, name);) names.push_back(name);
  }
  out << "  task rows: " << task_rows << "\n";
  // Each task's last row (a row whose task is no index of one is left out).
  std::map<std::size_t, std::size_t> last;
  for (std::size_t i = 0; i < task_rows; ++i) {
    if (task_index[i] >= 0 && task_index[i] < 1e6) last[static_cast<std::size_t>(task_index[i])] = i;
  }
  for (const auto& [t, row] : last) {
    out << "    " << (t < names.size() ? names[t] : "task " + std::to_string(t)) << ": acc " << significant(acc[row])
        << " acc_norm " << significant(acc_norm[row]) << " (step " << significant(task_steps[row]) << ")\n";
  }
}

void print_indented(const std::string& lines, std::ostream& out) {
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) out << "  " << line << "\n";
}

// A run directory: its deck, its history's summary, its checkpoints and the end of its log, so that
// one command tells where a run (running or not) stands.
void inspect_run_directory(const std::string& path, std::ostream& out) {
  namespace fs = std::filesystem;
  const std::string dir = path.size() > 1 && path.back() == '/' ? path.substr(0, path.size() - 1) : path;
  const std::string history_path = dir + "/history.h5", log_path = dir + "/log.txt";
  const bool has_deck = holds_run(dir), has_log = fs::exists(log_path), has_history = fs::exists(history_path);
  if (!has_deck && !has_log && !has_history) {
    throw InputError(dir + ": a folder, but not a kgpt run directory (it holds no deck.yaml, log.txt or history.h5)");
  }
  out << dir << ": kgpt run directory\n";
  if (has_deck) out << "  deck: " << dir << "/deck.yaml (the resolved deck; deck.source.yaml as given)\n";
  if (has_history) {
    std::ostringstream history;
    try {
      inspect_history(Hdf5File(history_path, Hdf5File::Mode::read), history);
    } catch (const Error& e) {
      history << history_path << ": cannot be read: " << e.what() << "\n";
    }
    print_indented(history.str(), out);
  } else {
    out << "  history: none yet (" << history_path << ")\n";
  }
  const std::vector<std::string> checkpoints = list_checkpoints(dir);
  out << "  checkpoints: " << checkpoints.size();
  if (!checkpoints.empty()) {
    out << ", newest " << checkpoints.front();
    try {
      const Hdf5File newest(checkpoints.front(), Hdf5File::Mode::read);
      out << " (step " << significant(newest.read_scalar("/state/step")) << ")";
    } catch (const Error& e) {
      out << " (cannot be read: " << e.what() << "; kgpt train --resume takes the newest that loads)";
    }
  }
  out << "\n";
  const std::vector<std::string> events = event_files(dir);
  if (!events.empty()) {
    out << "  tensorboard: " << events.size() << " event file" << (events.size() == 1 ? "" : "s") << ", newest "
        << fs::path(events.back()).filename().string() << " (tensorboard --logdir " << dir << ")\n";
  }
  if (fs::exists(dir + "/artifact.yaml")) out << "  artifacts: " << dir << "/artifact.yaml lists what kgpt export wrote\n";
  if (!has_log) return;
  // The log's last lines: the newest step, evaluation or message.
  constexpr std::size_t kTailLines = 6;
  std::ifstream log(log_path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(log, line);) {
    tail.push_back(line);
    if (tail.size() > kTailLines) tail.pop_front();
  }
  out << "  log.txt, its last " << tail.size() << " lines:\n";
  for (const auto& line : tail) out << "    " << line << "\n";
}

}  // namespace

void describe_file(const std::string& path, std::ostream& out) {
  if (std::filesystem::is_directory(path)) {
    inspect_run_directory(path, out);
    return;
  }
  if (is_artifact_file(path)) {
    inspect_artifact(path, out);
    return;
  }
  const Hdf5File file(path, Hdf5File::Mode::read);
  if (file.contains("/params")) {
    inspect_checkpoint(file, out);
  } else if (file.contains("/train/step")) {
    inspect_history(file, out);
  } else {
    throw InputError(file.path() + ": neither a kgpt checkpoint (/params) nor a history (/train)");
  }
}

}  // namespace kgpt::io
