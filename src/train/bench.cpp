#include "train/bench.hpp"

#include <sys/resource.h>

#include <chrono>

#include "core/random.hpp"
#include "model/gemm.hpp"
#include "model/golf.hpp"
#include "model/gpt2.hpp"
#include "optim/optimizer.hpp"

namespace kgpt::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double measure_sgemm(int n) {
  const ExecSpace exec;
  Matrix<float> a("kgpt::bench::a", n, n), b("kgpt::bench::b", n, n), c("kgpt::bench::c", n, n);
  random::fill_normal(a, 1, 0, 1.0);
  random::fill_normal(b, 1, 1, 1.0);
  model::gemm(exec, model::Op::none, model::Op::none, 1.0f, a, b, 0.0f, c);  // warm-up
  exec.fence();
  int reps = 0;
  const auto start = Clock::now();
  do {
    model::gemm(exec, model::Op::none, model::Op::none, 1.0f, a, b, 0.0f, c);
    exec.fence();
    ++reps;
  } while (seconds_since(start) < 1.0 || reps < 3);
  return 2.0 * n * n * static_cast<double>(n) * reps / seconds_since(start);
}

template <class Model>
BenchResult bench_model(const config::ResolvedDeck& deck, const BenchOptions& options) {
  const config::Config& c = deck.config;
  const config::BatchPlan& plan = deck.plan;
  const ExecSpace exec;
  model::set_gemm_precision(c.train.gemm_precision);
  const int batch = static_cast<int>(plan.local_sequences), seq = c.train.seq_len;
  Model model(c.model, batch, seq);
  model::initialize(model.parameters(), static_cast<std::uint64_t>(c.run.seed));
  optim::Optimizer<float> optimizer(model.parameters(), c);
  TokenMatrix inputs("kgpt::bench::inputs", batch, seq), targets("kgpt::bench::targets", batch, seq);
  auto host = Kokkos::create_mirror_view(inputs);
  for (std::size_t i = 0; i < inputs.span(); ++i) host.data()[i] = static_cast<int>(random::bits(3, 0, i) % c.model.vocab_size);
  Kokkos::deep_copy(inputs, host);
  for (std::size_t i = 0; i < inputs.span(); ++i) host.data()[i] = static_cast<int>(random::bits(3, 1, i) % c.model.vocab_size);
  Kokkos::deep_copy(targets, host);

  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  auto step = [&](int index) {
    auto mark = Clock::now();
    auto lap = [&mark, &exec](double& total) {
      exec.fence();
      total += seconds_since(mark);
      mark = Clock::now();
    };
    double zero_s = 0;
    model::zero_gradients(exec, model.parameters());
    lap(zero_s);
    backward_s += zero_s;
    for (int micro = 0; micro < plan.grad_accum_steps; ++micro) {
      model.forward(exec, inputs, targets);
      lap(forward_s);
      model.backward(exec, static_cast<float>(plan.grad_scale));
      lap(backward_s);
    }
    optimizer.step(exec, index, 1.0);
    lap(optimizer_s);
  };
  for (int i = 0; i < options.warmup_steps; ++i) step(i);
  forward_s = backward_s = optimizer_s = 0;
  const auto start = Clock::now();
  for (int i = 0; i < options.steps; ++i) step(options.warmup_steps + i);
  const double seconds = seconds_since(start) / options.steps;
  // Every View of the model, its workspaces and the optimizer is still allocated here.
  const double device_used = compat::device_memory_used_bytes();

  std::size_t positions = 0;
  if (model.parameters().layout().contains("transformer.wpe.weight")) {
    positions = model.parameters().layout().find("transformer.wpe.weight").size;
  }
  BenchResult result;
  result.step_ms = seconds * 1e3;
  result.forward_ms = forward_s * 1e3 / options.steps;
  result.backward_ms = backward_s * 1e3 / options.steps;
  result.optimizer_ms = optimizer_s * 1e3 / options.steps;
  result.tokens_per_s = static_cast<double>(c.train.global_batch_tokens) / seconds;
  result.flops_per_token = training_flops_per_token(deck, model.parameters().layout().parameter_count() - positions);
  result.model_flops = result.flops_per_token * result.tokens_per_s;
  result.device_used_bytes = device_used;
  return result;
}

}  // namespace

double training_flops_per_token(const config::ResolvedDeck& deck, std::size_t parameters_without_positions) {
  const config::ModelConfig& m = deck.config.model;
  const double head_dim = static_cast<double>(m.d_model) / m.n_head;
  return 6.0 * static_cast<double>(parameters_without_positions) +
         12.0 * m.n_layer * m.n_head * head_dim * deck.config.train.seq_len;
}

BenchResult run_bench(const config::ResolvedDeck& deck, const BenchOptions& options) {
  const double sgemm = measure_sgemm(options.gemm_size);
  BenchResult result = deck.config.model.family == "gpt2" ? bench_model<model::Gpt2Model<float>>(deck, options)
                                                          : bench_model<model::GolfModel<float>>(deck, options);
  result.sgemm_flops = sgemm;
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  result.peak_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
  return result;
}

}  // namespace kgpt::train
