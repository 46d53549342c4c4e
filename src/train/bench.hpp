#pragma once
// `kgpt bench`: the speed of a deck's training step on this machine (the step `kgpt train` runs,
// train/step.hpp, on synthetic tokens, on every rank of the job), next to the machine's ceilings
// measured in the same run: a plain sgemm (and for a bf16 deck a bf16 product), so the ratio says
// how much of the machine's GEMM rate the model reaches, and on a GPU a device-to-device copy, the
// bandwidth memory-bound kernels can reach. Figures, never pass/fail.

#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/backend.hpp"
#include "core/profile.hpp"

namespace kgpt::train {

// The synthetic tokens' distribution: uniform over the vocabulary, or Zipf's law (as real text).
enum class TokenDistribution { uniform, zipf };

struct BenchOptions {
  TokenDistribution tokens = TokenDistribution::uniform;
  int warmup_steps = 2;
  int steps = 5;
  int gemm_size = backend::on_gpu ? 8192 : 1024;  // the side of the ceilings' products: one that fills the machine
  int profile_steps = 0;  // > 0: after the timed steps, this many steps with every op fenced and timed
  // > 1, on one rank: run the Newton-Schulz share of the busiest of this many ranks sharing Muon
  // (optim::shared_loads) and apply every update, as one rank of such a job does; the exchange of
  // the updates, which needs the other ranks, is not run.
  int muon_share_of = 0;
};

struct BenchResult {
  double sgemm_flops = 0;        // FLOP/s of an n^3 fp32 GEMM
  double bf16_gemm_flops = 0;    // bf16 decks: FLOP/s of an n^3 bf16 GEMM, as their products run (else 0)
  double copy_bytes_per_s = 0;   // GPU builds: bytes read plus written per second by a device copy (else 0)
  double step_ms = 0;            // mean optimizer step, all micro-steps included
  // With profile_steps > 0: the parts of a profiled step, each phase fenced (backward includes zeroing).
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double tokens_per_s = 0;
  double model_flops = 0;        // FLOP/s by the 6N + attention estimate
  double flops_per_token = 0;
  // llm.c's count: 6 N with every parameter (learned positions included) + 6 L C T (attention causal).
  double flops_per_token_llmc = 0;
  double muon_share = 0;          // this rank's part of the Newton-Schulz arithmetic (0: no Muon)
  int muon_rank = 0, muon_ranks = 1;  // the rank of how many sharing Muon the optimizer ran as
  double peak_rss_bytes = 0;
  double device_used_bytes = -1;  // GPU memory in use after the timed steps (-1: no GPU backend)
  double view_peak_bytes = -1;    // high-water mark of kgpt's Views in the model's memory space (-1: not counted)
  std::vector<std::pair<std::string, double>> view_peak_by_label;  // what made up that mark, by View label
  // With profile_steps > 0: per phase and op, totals over the profiled steps, and their mean time.
  std::vector<profile::Entry> profile;
  std::vector<std::string> gemm_choices;  // products whose algorithm was chosen by timing (cuBLASLt)
  double profiled_step_ms = 0;
  const char* attention = "";     // the attention implementation that ran
  std::string stall_watchdog;     // how the stall watchdog watched the steps ("off" when not)
  double stall_watchdog_ms = 0;   // its cost per step: its thread's CPU time and the progress marks' time
  double tensorboard_ms = 0;      // rank 0: what writing a step's TensorBoard event and flushing it cost
};

// Runs the deck's training step on synthetic tokens (no data files are read) and returns this
// rank's figures. Collective over MPI_COMM_WORLD: the deck's batch plan must be for its size.
BenchResult run_bench(const config::ResolvedDeck& deck, const BenchOptions& options);

}  // namespace kgpt::train
