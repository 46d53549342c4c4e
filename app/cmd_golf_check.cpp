// kgpt golf-check: finished runs against parameter-golf's size, time and significance rules
// (inference/golf_check.hpp says what is counted and how).

#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "inference/golf_check.hpp"
#include "parallel/world.hpp"

namespace kgpt::app {

const CommandSpec& golf_check_spec() {
  static const CommandSpec spec{
      "golf-check",
      "RUN_DIR... [--baseline BPB] [--code DIR]",
      "finished runs against parameter-golf's limits: artifact and code bytes, train and eval time, seeds",
      "For each run directory, after `kgpt export` of its checkpoint (which writes artifact.yaml):\n"
      "  size: the artifact's bytes plus the code's against 16,000,000. The code is counted as the\n"
      "    records count theirs, compressed as a self-extracting submission carries it: the files the\n"
      "    kgpt binary is built from (app/, src/, cmake/, CMakeLists.txt, CMakePresets.json of the\n"
      "    checkout it was built in, or --code DIR), each as its path, size and bytes, in path order,\n"
      "    compressed with brotli at quality 11; the libraries it links are not counted, as the\n"
      "    records' imports are not.\n"
      "  train: the steps' times summed from history.h5 (evaluations excluded, what\n"
      "    train.max_wallclock_seconds counts) against 600 s.\n"
      "  eval: the artifact scored again on the deck's val split, here, against 600 s; its val_bpb\n"
      "    beside the round-trip figure `kgpt eval` recorded in artifact.yaml.\n"
      "Over two or more runs (seeds of one deck): the val_bpb's mean and sample standard deviation,\n"
      "and with --baseline the one-sided t-test's p-value that the mean is below BPB (the records\n"
      "ask p < 0.01 against the record they beat, less its required margin).\n"
      "Prints key:value lines per run and a last line; exit code 0 when every run fits its limits,\n"
      "1 when one does not, 2 for a missing or bad run file (named).",
      {{"baseline", "BPB", "the val_bpb the runs' mean is tested against (one-sided)"},
       {"code", "DIR", "the kgpt checkout whose source is counted (default: the one this binary was built from)"}},
      1,
      1000};
  return spec;
}

int run_golf_check(const ParsedArgs& args) {
  const double baseline =
      args.has("baseline") ? double_option(args, "baseline", 0.0) : std::numeric_limits<double>::quiet_NaN();
  if (args.has("baseline") && !(baseline > 0.0 && std::isfinite(baseline))) {
    throw InputError("--baseline: '" + args.get("baseline") + "' is not a positive val_bpb");
  }
  const bool printing = parallel::world().rank == 0;
  inference::CodeCount code;
  parallel::agreed([&] { code = inference::count_code(args.get("code", KGPT_SOURCE_DIR)); });
  if (printing) {
    std::cout << "code: " << code.root << " files:" << code.files << " raw_bytes:" << code.raw_bytes
              << " brotli_bytes:" << code.compressed_bytes << " counted:" << code.compressed_bytes << std::endl;
  }
  bool all_within = true;
  std::vector<double> bpbs;
  for (const std::string& run_dir : args.positional()) {
    inference::RunCheck run;
    parallel::agreed([&] { run = inference::check_run(run_dir); });
    bpbs.push_back(run.eval.bpb);
    const std::uint64_t total = run.artifact_bytes + code.compressed_bytes;
    const bool fits = total <= inference::kGolfByteLimit;
    const bool trained_in_time = run.train_seconds <= inference::kGolfSecondsLimit;
    const bool evaluated_in_time = run.eval.seconds <= inference::kGolfSecondsLimit;
    all_within = all_within && fits && trained_in_time && evaluated_in_time;
    if (!printing) continue;
    char line[512];
    std::cout << "run:" << run_dir << " artifact:" << run.artifact << " artifact_bytes:" << run.artifact_bytes
              << " code_bytes:" << code.compressed_bytes << " total_bytes:" << total << " limit:" << inference::kGolfByteLimit
              << (fits ? " fits" : " exceeds") << std::endl;
    std::snprintf(line, sizeof(line), " train_s:%.1f steps:%lld limit_s:%.0f %s", run.train_seconds,
                  static_cast<long long>(run.steps), inference::kGolfSecondsLimit, trained_in_time ? "within" : "over");
    std::cout << "run:" << run_dir << line << std::endl;
    std::snprintf(line, sizeof(line), " val_loss:%.6f val_bpb:%.6f val_tokens:%zu eval_s:%.2f limit_s:%.0f %s",
                  run.eval.loss, run.eval.bpb, run.eval.tokens, run.eval.seconds, inference::kGolfSecondsLimit,
                  evaluated_in_time ? "within" : "over");
    std::cout << "run:" << run_dir << line;
    if (run.recorded_bpb >= 0) {
      std::snprintf(line, sizeof(line), " recorded_val_bpb:%.6f %s", run.recorded_bpb,
                    std::fabs(run.recorded_bpb - run.eval.bpb) <= 5e-7 ? "same" : "differs");
      std::cout << line;
    } else {
      std::cout << " recorded_val_bpb:none";
    }
    std::cout << std::endl;
  }
  const inference::SeedStatistics stats = inference::seed_statistics(bpbs, baseline);
  if (printing) {
    char line[512];
    if (stats.runs >= 2) {
      std::snprintf(line, sizeof(line), "seeds: runs:%zu mean_val_bpb:%.6f std_val_bpb:%.6f", stats.runs, stats.mean,
                    stats.std_dev);
      std::cout << line;
      if (!std::isnan(baseline)) {
        std::snprintf(line, sizeof(line), " baseline:%.6f t:%.6g p_value:%.6g (one-sided: the mean below the baseline)",
                      baseline, stats.t, stats.p_value);
        std::cout << line;
      }
      std::cout << std::endl;
    } else if (!std::isnan(baseline)) {
      std::cout << "seeds: runs:1: no spread and no p-value from one run; the records give three seeds" << std::endl;
    }
    std::cout << "golf-check: " << args.positional().size() << " run(s): "
              << (all_within ? "every one within the size and time limits" : "a limit exceeded (exit code 1)")
              << std::endl;
  }
  return all_within ? 0 : 1;
}

}  // namespace kgpt::app
