// kgpt bench: how fast a deck's training step runs here, against this machine's sgemm rate.

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "core/kokkos_compat.hpp"
#include "model/gemm.hpp"
#include "parallel/world.hpp"
#include "train/bench.hpp"

namespace kgpt::app {

const CommandSpec& bench_spec() {
  static const CommandSpec spec{
      "bench",
      "DECK [--set section.key=value]... [--steps N] [--warmup N] [--gemm-size N]",
      "measure a deck's training speed against this machine's sgemm",
      "Builds the deck's model and runs the optimizer step `kgpt train` runs (every micro-step's\n"
      "forward and backward, gradient averaging, clipping, the schedule, the optimizer) on synthetic\n"
      "tokens, and prints tokens/s, ms/step and its forward, backward and optimizer parts (each phase\n"
      "fenced), the model's FLOP/s (6N + 12 L H D T FLOPs per token), the FLOP/s of an fp32 GEMM\n"
      "measured in the same run, their ratio, and the process's peak resident memory. Reads no data\n"
      "files. Under mpiexec or srun every rank runs its share of the batch and rank 0 prints. Set\n"
      "OPENBLAS_NUM_THREADS to the cores the run may use.",
      {
          {"set", "section.key=value", "override a deck key (repeatable)"},
          {"steps", "N", "timed optimizer steps (default 5)"},
          {"warmup", "N", "untimed steps first (default 2)"},
          {"gemm-size", "N", "side of the square sgemm that sets the reference rate (default 1024)"},
      },
      1,
      1};
  return spec;
}

int run_bench(const ParsedArgs& args) {
  config::ResolvedDeck deck;
  train::BenchOptions options;
  parallel::agreed([&] {
    deck = load_deck_from_args(args, parallel::world().size);
    options.steps = static_cast<int>(int_option(args, "steps", options.steps, 1, 100000));
    options.warmup_steps = static_cast<int>(int_option(args, "warmup", options.warmup_steps, 0, 100000));
    options.gemm_size = static_cast<int>(int_option(args, "gemm-size", options.gemm_size, 64, 16384));
  });
  const train::BenchResult r = train::run_bench(deck, options);
  if (parallel::world().rank != 0) return 0;
  char line[512];
  std::snprintf(line, sizeof(line),
                "bench deck:%s family:%s backend:%s precision:%s attention:%s tokens_per_step:%lld micro_batch:%lldx%d grad_accum_steps:%d\n"
                "tok/s:%.0f step_ms:%.1f forward_ms:%.1f backward_ms:%.1f optimizer_ms:%.1f flops_per_token:%.4g model_gflops:%.1f sgemm_gflops:%.1f ratio:%.2f "
                "peak_rss_mb:%.0f\n",
                deck.path.c_str(), config::name_of(deck.config.model.family), compat::enabled_backends().c_str(),
                model::gemm_precision_name(model::gemm_precision(deck.config.model.precision)), r.attention,
                deck.config.train.global_batch_tokens, deck.plan.local_sequences, deck.plan.seq_len,
                deck.plan.grad_accum_steps, r.tokens_per_s, r.step_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.flops_per_token, r.model_flops / 1e9,
                r.sgemm_flops / 1e9, r.model_flops / r.sgemm_flops, r.peak_rss_bytes / (1024.0 * 1024.0));
  std::cout << line;
  if (r.device_used_bytes >= 0) {
    std::snprintf(line, sizeof(line), "device_mem_used_mb:%.0f\n", r.device_used_bytes / (1024.0 * 1024.0));
    std::cout << line;
  }
  return 0;
}

}  // namespace kgpt::app
