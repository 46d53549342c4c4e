// kgpt bench: how fast a deck's training step runs here, against this machine's GEMM rate.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/profile.hpp"
#include "optim/optimizer.hpp"
#include "parallel/world.hpp"
#include "train/bench.hpp"
#include "train/blas_report.hpp"
#include "train/memory_plan.hpp"
#include "train/progress.hpp"

namespace kgpt::app {

const CommandSpec& bench_spec() {
  static const CommandSpec spec{
      "bench",
      "DECK [--set section.key=value]... [--steps N] [--warmup N] [--gemm-size N] [--tokens uniform|zipf] "
      "[--profile [--profile-steps N]] [--memory] [--muon-share W]",
      "measure a deck's training speed against this machine's GEMM rate",
      "Builds the deck's model and runs the optimizer step `kgpt train` runs (every micro-step's\n"
      "forward and backward, gradient averaging, clipping, the schedule, the optimizer) on synthetic\n"
      "tokens, as `kgpt train` runs it (no fence inside a step), and prints tokens/s, ms/step, the\n"
      "model's FLOP/s (6N + 12 L H D T FLOPs per token), the FLOP/s of an fp32 GEMM\n"
      "measured in the same run and their ratio (for a bf16 deck also a bf16 GEMM's, bf16_ratio; on a\n"
      "GPU also a device copy's bytes per second, copy_gbs: the ceilings the step is read against),\n"
      "the process's peak resident memory, the high-water\n"
      "mark of kgpt's own arrays in the model's memory space (the GPU on a CUDA build) and, on a GPU,\n"
      "the device memory in use, and the memory plan's total (kgpt check) beside that high-water mark (both\n"
      "the largest rank's). The stall watchdog (parallel.stall_timeout_s) watches the steps as in\n"
      "training; its cost per step (its thread's CPU time and the progress marks) is printed as\n"
      "watchdog_ms_per_step and watchdog_share; so is what writing a step's TensorBoard event and\n"
      "flushing it costs (tensorboard_ms_per_step, tensorboard_share). Reads no data files. Under\n"
      "mpiexec or srun every rank runs its share of the batch and rank 0 prints. Set\n"
      "OPENBLAS_NUM_THREADS to the cores the run may use.\n"
      "\n"
      "--profile then runs more steps with every phase, kernel, GEMM, attention call and the gradient\n"
      "averaging fenced and timed, prints the step's forward, backward and optimizer parts, and per\n"
      "phase each op's calls and milliseconds per step, its share of the step and, for products and\n"
      "attention, its TFLOP/s (attention counts the causal half). Fencing serialises the GPU, so the\n"
      "profiled step is slower than the timed one: the table says where time goes. On a GPU, each\n"
      "product whose algorithm was chosen by timing cuBLASLt's candidates (a side not a multiple of\n"
      "8) gets a `gemm choice:` line after the table. It cannot run while a Kokkos Tools library\n"
      "(KOKKOS_TOOLS_LIBS) is loaded.",
      {
          {"set", "section.key=value", "override a deck key (repeatable)"},
          {"steps", "N", "timed optimizer steps (default 5)"},
          {"warmup", "N", "untimed steps first, at least 1: the first makes the GEMM plans and attention graphs (default 2)"},
          {"gemm-size", "N", "side of the square GEMMs that set the reference rates (default 1024; 8192 on a GPU)"},
          {"tokens", "uniform|zipf", "the synthetic tokens: uniform over the vocabulary (default), or Zipf's law, "
                                     "a few tokens in many rows as in real text"},
          {"profile", "", "after the timed steps, print where a step's time goes, op by op"},
          {"memory", "", "print the memory plan's parts and the measured peak array by array"},
          {"profile-steps", "N", "steps the profile averages over (default 3)"},
          {"muon-share", "W", "on one rank, time one rank of W sharing Muon (parallel.share_muon): the busiest "
                              "rank's Newton-Schulz share, every update applied, the exchange left out"},
      },
      1,
      1};
  return spec;
}

namespace {

// Per phase in the order phases ran, ops by time: calls and ms per step, the share of the step and,
// for the ops that count their arithmetic (products, attention), their rate.
void print_profile(std::ostream& out, const train::BenchResult& r, int steps) {
  std::vector<std::string> phases;
  for (const auto& e : r.profile) {
    if (std::find(phases.begin(), phases.end(), e.phase) == phases.end()) phases.push_back(e.phase);
  }
  char line[512];
  std::snprintf(line, sizeof(line),
                "profile steps:%d profiled_step_ms:%.2f forward_ms:%.2f backward_ms:%.2f optimizer_ms:%.2f "
                "(every phase and op fenced; unprofiled step_ms:%.2f)\n",
                steps, r.profiled_step_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.step_ms);
  out << line;
  std::snprintf(line, sizeof(line), "%-12s %-64s %10s %10s %6s %9s\n", "phase", "op", "calls/step", "ms/step", "%",
                "TFLOP/s");
  out << line;
  double attributed_ms = 0;
  for (const std::string& phase : phases) {
    std::vector<profile::Entry> rows;
    double phase_ms = 0;
    for (const auto& e : r.profile) {
      if (e.phase != phase) continue;
      rows.push_back(e);
      phase_ms += e.seconds * 1e3 / steps;
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    for (const auto& e : rows) {
      const double ms = e.seconds * 1e3 / steps;
      std::snprintf(line, sizeof(line), "%-12s %-64s %10.1f %10.3f %6.2f", phase.c_str(), e.name.c_str(),
                    static_cast<double>(e.calls) / steps, ms, 100.0 * ms / r.profiled_step_ms);
      out << line;
      if (e.flops > 0 && e.seconds > 0) {
        std::snprintf(line, sizeof(line), " %9.3f", e.flops / e.seconds / 1e12);
        out << line;
      }
      out << "\n";
    }
    std::snprintf(line, sizeof(line), "%-12s %-64s %10s %10.3f %6.2f\n", phase.c_str(), "(phase total)", "", phase_ms,
                  100.0 * phase_ms / r.profiled_step_ms);
    out << line;
    attributed_ms += phase_ms;
  }
  const double other_ms = r.profiled_step_ms - attributed_ms;
  std::snprintf(line, sizeof(line), "%-12s %-64s %10s %10.3f %6.2f\n", "-", "(outside ops: copies, host work, launches)",
                "", other_ms, 100.0 * other_ms / r.profiled_step_ms);
  out << line;
  // Where cuBLASLt's candidates were timed (products with a side not a multiple of 8): what was kept.
  for (const std::string& choice : r.gemm_choices) out << "gemm choice: " << choice << "\n";
}

}  // namespace

int run_bench(const ParsedArgs& args) {
  config::ResolvedDeck deck;
  train::BenchOptions options;
  train::MemoryPlan memory;
  parallel::agreed([&] {
    deck = load_deck_from_args(args, parallel::world().size);
    memory = train::plan_memory(deck, model::this_build());
    train::require_fit(deck, memory, model::this_build());
    options.steps = static_cast<int>(int_option(args, "steps", options.steps, 1, 100000));
    options.warmup_steps = static_cast<int>(int_option(args, "warmup", options.warmup_steps, 1, 100000));
    options.gemm_size = static_cast<int>(int_option(args, "gemm-size", options.gemm_size, 64, 16384));
    if (args.has("tokens")) {
      const std::string tokens = args.get("tokens");
      if (tokens == "zipf") options.tokens = train::TokenDistribution::zipf;
      else if (tokens != "uniform") throw InputError("--tokens: '" + tokens + "' is not one of uniform, zipf");
    }
    options.muon_share_of = static_cast<int>(int_option(args, "muon-share", 0, 2, 4096));
    if (options.muon_share_of > 1 && parallel::world().size != 1) {
      throw InputError("--muon-share: times one rank of a shared job on a job of one rank; this job has " +
                       std::to_string(parallel::world().size));
    }
    if (options.muon_share_of > 1 && !optim::shares_work(deck.config)) {
      throw InputError("--muon-share: no optimizer rule of the deck splits its work among ranks (optim.matrix_optimizer is " +
                       deck.config.optim.matrix_optimizer + ")");
    }
    if (args.has("profile-steps") && !args.has("profile")) {
      throw InputError("--profile-steps: only meaningful with --profile");
    }
    if (args.has("profile")) {
      options.profile_steps = static_cast<int>(int_option(args, "profile-steps", 3, 1, 1000));
      if (!profile::available()) {
        throw InputError("--profile: a Kokkos Tools library (KOKKOS_TOOLS_LIBS) holds Kokkos's kernel callbacks; "
                          "unset KOKKOS_TOOLS_LIBS or drop --profile");
      }
    }
  });
  const train::BenchResult r = train::run_bench(deck, options);
  const std::string blas = train::blas_report();  // a collective: every rank, before rank 0 alone goes on
  // The plan is the largest rank's (ranks differ under parallel.zero_stage: 1): so is the peak printed.
  const double view_peak = parallel::max(r.view_peak_bytes);
  if (parallel::world().rank != 0) return 0;
  char line[512];
  std::snprintf(line, sizeof(line),
                "bench deck:%s family:%s backend:%s precision:%s fp8:%s attention:%s tokens:%s tokens_per_step:%lld micro_batch:%lldx%d grad_accum_steps:%d\n"
                "tok/s:%.0f step_ms:%.1f flops_per_token:%.4g model_gflops:%.1f sgemm_gflops:%.1f ratio:%.2f",
                deck.path.c_str(), deck.config.model.family.c_str(), compat::enabled_backends().c_str(),
                config::name_of(deck.config.model.precision), config::name_of(deck.config.model.fp8), r.attention,
                options.tokens == train::TokenDistribution::zipf ? "zipf" : "uniform",
                deck.config.train.global_batch_tokens, deck.plan.local_sequences, deck.plan.seq_len,
                deck.plan.grad_accum_steps, r.tokens_per_s, r.step_ms, r.flops_per_token, r.model_flops / 1e9,
                r.sgemm_flops / 1e9, r.model_flops / r.sgemm_flops);
  std::cout << blas << "\n" << line;
  // The ceilings a bf16 model and a GPU's memory-bound kernels are read against.
  if (r.bf16_gemm_flops > 0) {
    std::snprintf(line, sizeof(line), " bf16_gemm_gflops:%.1f bf16_ratio:%.2f", r.bf16_gemm_flops / 1e9,
                  r.model_flops / r.bf16_gemm_flops);
    std::cout << line;
  }
  if (r.copy_bytes_per_s > 0) {
    std::snprintf(line, sizeof(line), " copy_gbs:%.1f", r.copy_bytes_per_s / 1e9);
    std::cout << line;
  }
  if (const double peak = train::mfu_peak_flops(deck.config.model); peak > 0) {
    // Model FLOP/s over the device's dense peak, on kgpt's count (6 N + 12 L H D T, N without
    // learned positions) and llm.c's (6 N + 6 L C T, every parameter in N).
    std::snprintf(line, sizeof(line), " mfu:%.4f mfu_llmc:%.4f", r.model_flops / peak,
                  r.flops_per_token_llmc * r.tokens_per_s / peak);
    std::cout << line;
  }
  std::snprintf(line, sizeof(line), " peak_rss_mb:%.0f\n", r.peak_rss_bytes / (1024.0 * 1024.0));
  std::cout << line;
  if (r.muon_share > 0) {
    std::snprintf(line, sizeof(line), "muon_share:%.4f muon_rank:%d muon_ranks:%d%s\n", r.muon_share, r.muon_rank,
                  r.muon_ranks, options.muon_share_of > 1 ? " (one rank of a shared job; the exchange not run)" : "");
    std::cout << line;
  }
  if (r.stall_watchdog == "off") {
    std::cout << "stall_watchdog:off\n";
  } else {
    std::snprintf(line, sizeof(line), "stall_watchdog:%s watchdog_ms_per_step:%.4f watchdog_share:%.4f%%\n",
                  r.stall_watchdog.c_str(), r.stall_watchdog_ms, 100 * r.stall_watchdog_ms / r.step_ms);
    std::cout << line;
  }
  // kgpt train's TensorBoard events at train.log_every 1, each step's flushed (rank 0 writes them).
  std::snprintf(line, sizeof(line), "tensorboard_ms_per_step:%.4f tensorboard_share:%.4f%%\n", r.tensorboard_ms,
                100 * r.tensorboard_ms / r.step_ms);
  std::cout << line;
  if (view_peak >= 0) {
    std::snprintf(line, sizeof(line), "view_peak_mb:%.1f plan_mb:%.1f plan_vs_view_peak:%.4f\n",
                  view_peak / (1024.0 * 1024.0), memory.total / (1024.0 * 1024.0), memory.total / view_peak);
    std::cout << line;
  } else {
    std::snprintf(line, sizeof(line), "plan_mb:%.1f\n", memory.total / (1024.0 * 1024.0));
    std::cout << line;
  }
  if (args.has("memory")) {
    std::cout << "memory plan (rank 0):\n";
    for (const auto& text : train::describe(memory)) std::cout << text << "\n";
    std::cout << "measured peak by array (rank 0):\n";
    for (const auto& [label, bytes] : r.view_peak_by_label) {
      std::snprintf(line, sizeof(line), "  %-48s %12.3f MiB\n", label.c_str(), bytes / (1024.0 * 1024.0));
      std::cout << line;
    }
  }
  if (r.device_used_bytes >= 0) {
    std::snprintf(line, sizeof(line), "device_mem_used_mb:%.0f\n", r.device_used_bytes / (1024.0 * 1024.0));
    std::cout << line;
  }
  if (options.profile_steps > 0) print_profile(std::cout, r, options.profile_steps);
  return 0;
}

}  // namespace kgpt::app
