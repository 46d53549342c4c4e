#pragma once
// What a deck's step should take on H100s, scaled from a measured figure: golf's baseline deck
// (inputs/golf_8xh100.yaml) as one rank of 8 on one H100 SXM, a micro-step of 64 x 1024 tokens with
// that rank's share of Muon, took 34.3 ms (docs/benchmarks.md, "H100, against the strong PyTorch").
// A deck's step is estimated at the same FLOP rate: its FLOPs per token (the family's count, the
// bench's) times the tokens one rank runs a step, plus the exposed all-reduce of its gradients at
// NVLink's bus bandwidth. An estimate: a deck whose kernels are less bound by its products (a small
// d_model, a long seq_len, many row kernels) runs below that rate; kgpt bench measures.

#include <string>

#include "config/deck.hpp"

namespace kgpt::train {

struct StepEstimate {
  double rank_tokens = 0;           // tokens one rank runs a step
  double flops_per_token = 0;       // the deck's, by its family's count
  double baseline_flops_per_token = 0;
  double compute_ms = 0;            // at the baseline's measured rate
  double allreduce_ms = 0;          // the gradients' all-reduce, if none of it overlapped
  double step_ms = 0;
  double tokens_per_s_per_gpu = 0;
};

// The measured figure the estimate scales from.
constexpr double kBaselineRankMs = 34.3;
constexpr double kBaselineRankTokens = 65536;
constexpr double kNvlinkBusBytesPerS = 350e9;  // the lower of the 350-480 GB/s bench/scaling.py takes

// The estimate of one step of `deck` at its world size, on bf16 as the baseline ran.
StepEstimate estimate_h100_step(const config::ResolvedDeck& deck);

// One line for kgpt check.
std::string describe(const StepEstimate& estimate, int world_size);

}  // namespace kgpt::train
