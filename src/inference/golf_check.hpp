#pragma once
// kgpt golf-check: finished runs set against parameter-golf's rules before a submission.
//   - size: the run's artifact (its artifact.yaml names it: kgpt export) plus the code, counted as
//     the records count theirs: the source that builds the program, compressed, as a self-extracting
//     submission carries it (the records ship train_gpt.py as lzma + base85 that execs itself).
//     kgpt's code is the files its binary is built from (app/, src/, cmake/, CMakeLists.txt,
//     CMakePresets.json; the libraries it links, like the records' imports, are not counted), each
//     as its path, its size and its bytes, in path order, compressed with brotli at quality 11.
//   - time: training as the wall-clock cap counts it (the sum of the steps' times in history.h5,
//     evaluations excluded, as train_gpt.py's timer); evaluation as this process takes to score the
//     artifact on the deck's val split, on this machine.
//   - val_bpb: recomputed from the artifact, beside the round-trip figure kgpt eval recorded.
//   - over several runs (seeds): the mean, the sample standard deviation and, against a baseline
//     figure, the one-sided t-test's p-value that the mean is below it.

#include <cstdint>
#include <string>
#include <vector>

#include "inference/from_checkpoint.hpp"

namespace kgpt::inference {

inline constexpr std::uint64_t kGolfByteLimit = 16000000;
inline constexpr double kGolfSecondsLimit = 600.0;

struct CodeCount {
  std::string root;
  std::size_t files = 0;
  std::uint64_t raw_bytes = 0, compressed_bytes = 0;
};
// The source under `root` (a kgpt checkout). InputError naming the folder where it holds none.
CodeCount count_code(const std::string& root);

struct RunCheck {
  std::string run_dir, artifact;
  std::uint64_t artifact_bytes = 0;
  std::int64_t steps = 0;
  double train_seconds = 0;    // the steps' times summed (history.h5 /train/step_ms)
  double recorded_bpb = -1;    // artifact.yaml's roundtrip_val_bpb (kgpt eval), or -1
  CheckpointEvaluation eval;   // the artifact scored here
};
// Reads `run_dir`'s artifact.yaml, its artifact and history.h5 and scores the artifact. Collective
// (evaluate_checkpoint). Missing or bad files: InputError naming them.
RunCheck check_run(const std::string& run_dir);

struct SeedStatistics {
  std::size_t runs = 0;
  double mean = 0, std_dev = 0;  // the sample standard deviation (n - 1); NaN for one run
  double t = 0, p_value = 0;     // against the baseline: t = (baseline - mean) / (s / sqrt(n)); NaN without
};
SeedStatistics seed_statistics(const std::vector<double>& values, double baseline);

}  // namespace kgpt::inference
