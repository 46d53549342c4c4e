#include "inference/golf_check.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>

#include "core/error.hpp"
#include "core/student_t.hpp"
#include "io/artifact.hpp"
#include "io/hdf5_file.hpp"

namespace kgpt::inference {

namespace fs = std::filesystem;

namespace {

// What the binary is built from, relative to a checkout's root.
constexpr const char* kCodeFolders[] = {"app", "src", "cmake"};
constexpr const char* kCodeFiles[] = {"CMakeLists.txt", "CMakePresets.json"};

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot read it");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string field(const YAML::Node& record, const char* key, const std::string& file) {
  const YAML::Node value = record[key];
  if (!value || !value.IsScalar()) throw InputError(file + ": no '" + key + "' field (kgpt export writes it)");
  return value.as<std::string>();
}

}  // namespace

CodeCount count_code(const std::string& root) {
  std::vector<std::string> files;
  for (const char* folder : kCodeFolders) {
    const fs::path dir = fs::path(root) / folder;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), root).generic_string());
    }
  }
  for (const char* file : kCodeFiles) {
    if (fs::is_regular_file(fs::path(root) / file)) files.push_back(file);
  }
  if (std::find(files.begin(), files.end(), "CMakeLists.txt") == files.end() ||
      std::none_of(files.begin(), files.end(), [](const std::string& f) { return f.rfind("src/", 0) == 0; })) {
    throw InputError(root + ": not a kgpt checkout (no CMakeLists.txt and src/ to count as the code); --code names one");
  }
  std::sort(files.begin(), files.end());
  CodeCount count;
  count.root = root;
  count.files = files.size();
  std::string archive;
  for (const std::string& file : files) {
    const std::string bytes = read_whole(fs::path(root) / file);
    count.raw_bytes += bytes.size();
    archive += file + "\n" + std::to_string(bytes.size()) + "\n" + bytes;
  }
  count.compressed_bytes = io::compress(archive, config::Compression::brotli).size();
  return count;
}

RunCheck check_run(const std::string& run_dir) {
  RunCheck run;
  run.run_dir = run_dir;
  if (!fs::is_directory(run_dir)) throw InputError(run_dir + ": no such run directory");
  const std::string record_file = (fs::path(run_dir) / "artifact.yaml").string();
  if (!fs::is_regular_file(record_file)) {
    throw InputError(run_dir + ": no artifact.yaml; `kgpt export` of the run's checkpoint writes the artifact and it");
  }
  YAML::Node record;
  try {
    record = YAML::LoadFile(record_file);
  } catch (const YAML::Exception& e) {
    throw InputError(record_file + ": not the YAML kgpt export writes: " + e.what());
  }
  run.artifact = field(record, "artifact", record_file);
  if (!fs::is_regular_file(run.artifact)) {
    throw InputError(record_file + ": its artifact " + run.artifact + " is missing (moved or deleted since the export)");
  }
  run.artifact_bytes = fs::file_size(run.artifact);
  if (record["roundtrip_val_bpb"]) {
    try {
      run.recorded_bpb = record["roundtrip_val_bpb"].as<double>();
    } catch (const YAML::Exception&) {
      throw InputError(record_file + ": roundtrip_val_bpb is not a number");
    }
  }
  const std::string history = (fs::path(run_dir) / "history.h5").string();
  if (!fs::is_regular_file(history)) throw InputError(run_dir + ": no history.h5 to read the training time from");
  {
    const io::Hdf5File file(history, io::Hdf5File::Mode::read);
    if (!file.contains("/train/step_ms")) throw InputError(history + ": no /train/step_ms column");
    const std::vector<double> step_ms = file.read_doubles("/train/step_ms");
    run.steps = static_cast<std::int64_t>(step_ms.size());
    run.train_seconds = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / 1000.0;
  }
  const config::ResolvedDeck deck = checkpoint_deck(run.artifact, {}, 1);
  run.eval = evaluate_checkpoint(deck, run.artifact);
  return run;
}

SeedStatistics seed_statistics(const std::vector<double>& values, double baseline) {
  SeedStatistics s;
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  s.runs = values.size();
  if (values.empty()) return s;
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  if (values.size() < 2) {
    s.std_dev = s.t = s.p_value = nan;
    return s;
  }
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.std_dev = std::sqrt(squares / (n - 1.0));
  if (std::isnan(baseline)) {
    s.t = s.p_value = nan;
    return s;
  }
  // H1: the runs' mean is below the baseline. Runs that agree to the last bit have no spread: the
  // mean is then below it or not, with certainty.
  const double se = s.std_dev / std::sqrt(n);
  if (se == 0.0) {
    s.t = s.mean < baseline ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
    s.p_value = s.mean < baseline ? 0.0 : 1.0;
    return s;
  }
  s.t = (baseline - s.mean) / se;
  s.p_value = stats::student_t_upper_tail(s.t, n - 1.0);
  return s;
}

}  // namespace kgpt::inference
