#include "train/bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "core/random.hpp"
#include "model/block_sequence.hpp"
#include "model/family.hpp"
#include "model/gemm/gemm.hpp"
#include "model/language_model.hpp"
#include "optim/optimizer.hpp"
#include "features/registry.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"
#include "train/progress.hpp"
#include "train/step.hpp"

namespace kgpt::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Calls of `run` per second, each fenced, after one untimed call (handles, workspaces, the
// library's choice of kernel): at least 3 calls and, for a ceiling, at least this long (on a GPU,
// hundreds of calls).
template <class Run>
double calls_per_second(const ExecSpace& exec, const Run& run) {
  constexpr double kSeconds = backend::on_gpu ? 0.3 : 1.0;
  run();
  exec.fence();
  int calls = 0;
  const auto start = Clock::now();
  double seconds = 0;
  do {
    run();
    exec.fence();
    ++calls;
    seconds = seconds_since(start);
  } while (seconds < kSeconds || calls < 3);
  return calls / seconds;
}

// FLOP/s of an n^3 product of random T operands written in T (fp32; bf16 as a bf16 model's products
// are). Random, not zero, inputs: a product of zeros can run faster.
template <class T>
double measure_gemm(int n) {
  const ExecSpace exec;
  Matrix<T> a("kgpt::bench::a", n, n), b("kgpt::bench::b", n, n), c("kgpt::bench::c", n, n);
  random::fill_normal(a, 1, 0, 1.0);
  random::fill_normal(b, 1, 1, 1.0);
  const double per_second = calls_per_second(exec, [&] {
    model::gemm(exec, model::Op::none, model::Op::none, model::GemmScalar<T>(1), a, b, model::GemmScalar<T>(0), c);
  });
  return model::product_flops(n, n, n) * per_second;
}

// Bytes read plus bytes written per second by a copy between two device arrays of 1 GiB of random
// values: the bandwidth a memory-bound kernel can reach.
double measure_device_copy() {
  constexpr std::size_t kElements = (std::size_t(1) << 30) / sizeof(float);
  const ExecSpace exec;
  Kokkos::View<float*, MemSpace> from("kgpt::bench::copy_from", kElements), to("kgpt::bench::copy_to", kElements);
  random::fill_uniform(from, 1, 2, -1.0, 1.0);
  return 2.0 * sizeof(float) * static_cast<double>(kElements) *
         calls_per_second(exec, [&] { Kokkos::deep_copy(exec, to, from); });
}

// The same two fixed batches of random tokens every micro-step: no data files are read. Uniform
// tokens, or Zipf's law (the k-th most frequent token with probability proportional to 1 / k), as
// in real text, where a few tokens fill several percent of the rows each.
class SyntheticBatches final : public BatchSource {
 public:
  SyntheticBatches(long long sequences, int seq_len, int vocab, TokenDistribution distribution)
      : inputs_(static_cast<std::size_t>(sequences) * seq_len), targets_(inputs_.size()) {
    std::vector<double> cdf(static_cast<std::size_t>(vocab));
    double total = 0;
    for (int k = 0; k < vocab; ++k) cdf[static_cast<std::size_t>(k)] = total += 1.0 / (k + 1);
    const auto draw = [&](std::uint64_t stream, std::size_t i) {
      if (distribution == TokenDistribution::uniform) return static_cast<int>(random::bits(3, stream, i) % vocab);
      const double u = random::uniform(3, stream, i) * total;
      return static_cast<int>(std::min<std::ptrdiff_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), vocab - 1));
    };
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      inputs_[i] = draw(0, i);
      targets_[i] = draw(1, i);
    }
  }

  void next(int* inputs, int* targets) override {
    std::copy(inputs_.begin(), inputs_.end(), inputs);
    std::copy(targets_.begin(), targets_.end(), targets);
  }

 private:
  std::vector<int> inputs_, targets_;
};

// What `all` calls of the watchdog's progress marks cost, `detail` of them with a text: each kind
// timed here over many calls.
double progress_seconds(std::int64_t all, std::int64_t detail) {
  constexpr int kCalls = 100000;
  auto start = Clock::now();
  for (int i = 0; i < kCalls; ++i) parallel::progress(parallel::Phase::forward, i);
  const double plain = seconds_since(start) / kCalls;
  start = Clock::now();
  for (int i = 0; i < kCalls / 10; ++i) parallel::progress_detail("summing the loss over ranks");
  const double with_text = seconds_since(start) / (kCalls / 10);
  parallel::progress_detail("");
  return static_cast<double>(all - detail) * plain + static_cast<double>(detail) * with_text;
}

// What `kgpt train`'s TensorBoard events add to a step, at their dearest (train.log_every 1): the
// step's scalars made, framed and written, and the file flushed, each step; ms per step.
double event_file_ms_per_step(int steps) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kgpt-bench-events-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  double seconds = 0;
  {
    io::EventFile events(dir.string(), 0);
    io::TrainRow row;
    const auto start = std::chrono::steady_clock::now();
    for (int step = 1; step <= steps; ++step) {
      row.step = step;
      row.loss = 1.0 / step;
      events.add(step, step_scalars(row, true));
      events.flush();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::error_code error;
  fs::remove_all(dir, error);
  return seconds * 1e3 / steps;
}

}  // namespace


BenchResult run_bench(const config::ResolvedDeck& deck, const BenchOptions& options) {
  // The ceilings first, their arrays freed before the model is built.
  const double sgemm = measure_gemm<float>(options.gemm_size);
  const double bf16_gemm =
      deck.config.model.precision == config::Precision::bf16 ? measure_gemm<bf16>(options.gemm_size) : 0.0;
  const double copy = backend::on_gpu ? measure_device_copy() : 0.0;
  // The watchdog watches the benchmark's steps as it watches training's, so its cost is in step_ms.
  parallel::WatchdogSettings watch;
  watch.timeout_seconds = deck.config.parallel.stall_timeout_s;
  watch.who = "kgpt bench";
  const parallel::StallWatchdog watchdog(watch);
  // Every View the step needs is counted, from the model to the warm-up steps (a step allocates
  // nothing after its first, so this is the peak); the timed steps run without the callbacks.
  const bool counting_memory = profile::track_memory(true);
  BenchResult result;
  const config::Config& c = deck.config;
  const config::BatchPlan& plan = deck.plan;
  const ExecSpace exec;
  const auto model = model::make_model<float>(c.model, static_cast<int>(plan.local_sequences), c.train.seq_len);
  model::initialize(model->parameters(), static_cast<std::uint64_t>(c.run.seed));
  const model::ParameterLayout& layout = model->parameters().layout();
  optim::Sharing sharing = work_sharing(deck, parallel::world().rank);
  if (options.muon_share_of > 1) {
    // The busiest rank's share: the one that sets the step's time.
    const std::vector<double> load = optim::shared_loads(layout, c, optimizer_shard(deck, layout), options.muon_share_of);
    sharing = {static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin()), options.muon_share_of};
  }
  optim::Optimizer<float> optimizer(model->parameters(), c, optimizer_shard(deck, layout), sharing);
  // The step features, as training runs them (features/registry.hpp).
  const features::StepFeatures features = features::make_step_features(c, layout);
  for (const auto& feature : features) feature->start(exec, model->parameters().values());
  // On one rank the step's averager exchanges nothing: the other ranks' updates stay zero.
  TrainStep<float> train_step(*model, optimizer, deck, parallel::world().size, features);
  result.muon_share = optimizer.shared_work_share();
  result.muon_rank = sharing.rank;
  result.muon_ranks = sharing.ranks;
  SyntheticBatches batches(plan.local_sequences, plan.seq_len, c.model.vocab_size, options.tokens);

  for (int i = 0; i < options.warmup_steps; ++i) train_step.run(exec, i, 0.0, batches, true);
  const double view_peak = counting_memory ? profile::peak_memory_bytes() : -1;
  if (counting_memory) result.view_peak_by_label = profile::peak_memory_by_label();
  profile::track_memory(false);
  double seconds = 0;
  const double watchdog_cpu_before = watchdog.thread_cpu_seconds();
  const parallel::ProgressCalls calls_before = parallel::progress_calls();
  // Timed as `kgpt train` runs them: no fence between the phases of a step.
  for (int i = 0; i < options.steps; ++i) seconds += train_step.run(exec, options.warmup_steps + i, 0.0, batches, false).seconds;
  seconds /= options.steps;
  if (watchdog.active()) {
    const double thread_cpu = watchdog.thread_cpu_seconds() - watchdog_cpu_before;
    const parallel::ProgressCalls calls = parallel::progress_calls();
    result.stall_watchdog_ms = (thread_cpu + progress_seconds(calls.all - calls_before.all, calls.detail - calls_before.detail)) *
                               1e3 / options.steps;
  }
  if (parallel::world().rank == 0) result.tensorboard_ms = event_file_ms_per_step(200);
  // Every View of the model, its workspaces and the optimizer is still allocated here.
  const double device_used = compat::device_memory_used_bytes();
  result.view_peak_bytes = view_peak;

  if (options.profile_steps > 0) {
    profile::enable(true);
    double profiled_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
    for (int i = 0; i < options.profile_steps; ++i) {
      const StepMetrics m = train_step.run(exec, options.warmup_steps + options.steps + i, 0.0, batches, true);
      profiled_s += m.seconds;
      forward_s += m.forward_seconds;
      backward_s += m.backward_seconds;
      optimizer_s += m.optimizer_seconds;
    }
    result.profile = profile::entries();
    result.gemm_choices = model::gemm_choices();
    result.profiled_step_ms = profiled_s * 1e3 / options.profile_steps;
    result.forward_ms = forward_s * 1e3 / options.profile_steps;
    result.backward_ms = backward_s * 1e3 / options.profile_steps;
    result.optimizer_ms = optimizer_s * 1e3 / options.profile_steps;
    profile::enable(false);
  }

  result.sgemm_flops = sgemm;
  result.bf16_gemm_flops = bf16_gemm;
  result.copy_bytes_per_s = copy;
  result.attention = model->attention_name();
  result.stall_watchdog = watchdog.summary();
  result.step_ms = seconds * 1e3;
  result.tokens_per_s = static_cast<double>(c.train.global_batch_tokens) / seconds;
  result.flops_per_token = model::family(c.model.family).flops_per_token(c.model, c.train.seq_len);
  result.flops_per_token_llmc = 6.0 * static_cast<double>(model::run_parameter_count(c.model, layout)) +
                                6.0 * model::run_layers(c.model) * c.model.d_model * static_cast<double>(c.train.seq_len);
  result.model_flops = result.flops_per_token * result.tokens_per_s;
  result.device_used_bytes = device_used;
  result.peak_rss_bytes = profile::process_peak_resident_bytes();
  return result;
}

}  // namespace kgpt::train
