#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/kokkos_compat.hpp"
#include "data/dataset_check.hpp"
#include "data/loader.hpp"
#include "data/shard.hpp"
#include "data/token_bytes.hpp"
#include "io/history.hpp"
#include "model/gemm.hpp"
#include "model/golf.hpp"
#include "model/gpt2.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "parallel/grad_averager.hpp"
#include "parallel/world.hpp"
#include "train/checkpoint.hpp"
#include "train/evaluator.hpp"
#include "train/signals.hpp"

namespace kgpt::train {

namespace {

using Clock = std::chrono::steady_clock;
using Real = float;  // CPU runs are fp32

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

std::string significant(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", value);
  return buffer;
}

// Equal on every rank when the parameters are.
template <class T>
std::uint64_t parameter_checksum(const Vector<T>& values) {
  const std::vector<T> host = to_host(values);
  Checksum sum;
  sum.add(host.data(), host.size() * sizeof(T));
  return sum.value;
}

// Throws AgreedFailure on every rank when some rank's parameters differ from rank 0's.
template <class T>
void check_parameters_agree(const Vector<T>& values, const std::string& when) {
  const auto sums = parallel::gather_all(parameter_checksum(values));
  std::string differing;
  for (std::size_t r = 1; r < sums.size(); ++r) {
    if (sums[r] != sums[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differing.empty()) {
    throw parallel::AgreedFailure(ExitCode::failure,
                                  "parameters " + when + " differ from rank 0's on rank(s) " + differing,
                                  parallel::world().rank == 0);
  }
}

// Same seed on every rank, then rank 0's values everywhere (semantic contract, point 6).
template <class T>
void broadcast_parameters(const Vector<T>& values) {
  std::vector<T> host = to_host(values);
  parallel::broadcast_from_root(host.data(), host.size() * sizeof(T));
  from_host(host, values);
}

template <class Model>
TrainSummary train_model(const config::ResolvedDeck& deck, io::RunLog& log, const TrainOptions& options) {
  const config::Config& c = deck.config;
  const config::BatchPlan& plan = deck.plan;
  const parallel::WorldInfo& world = parallel::world();
  const ExecSpace exec;
  model::set_gemm_precision(c.train.gemm_precision);
  const int batch = static_cast<int>(plan.local_sequences), seq = c.train.seq_len;
  std::unique_ptr<Model> model_holder;
  std::unique_ptr<optim::Optimizer<Real>> optimizer_holder;
  std::unique_ptr<data::DistributedLoader> loader_holder;
  std::unique_ptr<Evaluator> evaluator_holder;
  parallel::agreed([&] {
    model_holder = std::make_unique<Model>(c.model, batch, seq);
    model::initialize(model_holder->parameters(), static_cast<std::uint64_t>(c.run.seed));
    optimizer_holder = std::make_unique<optim::Optimizer<Real>>(model_holder->parameters(), c);
    loader_holder = std::make_unique<data::DistributedLoader>(
        data::TokenStream(data::find_shards(c.data.train_files), c.model.vocab_size), world.rank, plan.world_size,
        plan.local_tokens, seq);
    evaluator_holder = std::make_unique<Evaluator>(deck, batch);
  });
  Model& model = *model_holder;
  optim::Optimizer<Real>& optimizer = *optimizer_holder;
  data::DistributedLoader& loader = *loader_holder;
  Evaluator& evaluator = *evaluator_holder;
  const Vector<Real>& values = model.parameters().values();
  const bool writes_files = world.rank == 0 && !options.run_dir.empty();
  CheckpointState resumed;
  if (options.resume) {
    // Every rank reads the checkpoint itself; the newest one that loads wins.
    parallel::agreed([&] {
      std::string problems;
      for (const std::string& path : list_checkpoints(options.run_dir)) {
        try {
          resumed = load_checkpoint(path, model.parameters(), optimizer);
          log.line("resumed_from:" + path + " step:" + std::to_string(resumed.step));
          return;
        } catch (const Error& e) {
          log.line(std::string("skipping_checkpoint: ") + e.what());
          problems += std::string("\n  ") + e.what();
        }
      }
      throw InputError(checkpoint_folder(options.run_dir) + ": no checkpoint to resume from" +
                       (problems.empty() ? " (the folder holds none)" : ":" + problems));
    });
    loader.stream().seek(resumed.stream_position);
  }
  if (world.size > 1) {
    broadcast_parameters(values);
    check_parameters_agree(values, "at the start");
  }
  io::RunMetadata metadata;
  metadata.deck_text = config::render_resolved(deck);
  metadata.deck_path = deck.path;
  metadata.run_dir = options.run_dir;
  metadata.world_size = world.size;
  std::unique_ptr<io::History> history;
  if (writes_files) {
    const std::string path = options.run_dir + "/history.h5";
    history = std::make_unique<io::History>(options.resume && std::ifstream(path).good()
                                                ? io::History::resume(path, resumed.step, metadata)
                                                : io::History::create(path, metadata));
  }
  CheckpointPolicy keep;
  keep.keep_last = c.run.checkpoint_keep_last;
  keep.keep_every = c.run.checkpoint_keep_every;
  std::int64_t tokens_seen = resumed.tokens_seen;
  auto save_checkpoint = [&](int steps_done, double seconds_so_far) {
    // Every rank waits for rank 0's write, so that none exits or goes on before the checkpoint is on
    // disk, and a failed write ends every rank with rank 0's message.
    parallel::agreed([&] {
      if (!writes_files) return;
      CheckpointState state;
      state.step = steps_done;
      state.tokens_seen = tokens_seen;
      state.stream_position = loader.stream().tokens_consumed();
      state.training_seconds = seconds_so_far;
      state.seed = c.run.seed;
      const std::string path = write_checkpoint(options.run_dir, model.parameters(), optimizer, state, metadata, keep);
      log.line("checkpoint:" + path + " step:" + std::to_string(steps_done));
    });
  };
  PreemptionSignals signals;
  parallel::AveragingSettings averaging;
  averaging.bucket_elements = static_cast<std::size_t>(c.parallel.bucket_mb * 1e6 / sizeof(Real));
  averaging.overlap = c.parallel.overlap;
  const auto averager = parallel::make_gradient_averager<Real>(exec, model.parameters().grads(), world.size, averaging);
  const Real backward_scale = static_cast<Real>(plan.grad_scale * averager->backward_scale_factor());

  log.line("params:" + std::to_string(model.parameters().layout().parameter_count()) +
           " tokens_per_step:" + std::to_string(c.train.global_batch_tokens) +
           " grad_accum_steps:" + std::to_string(plan.grad_accum_steps) + " world_size:" + std::to_string(plan.world_size) +
           " backend:" + compat::enabled_backends() + " precision:" + model::gemm_precision_name());
  log.line("grad_averaging:" + std::string(world.size > 1 ? averager->transport() : "none") +
           " overlap:" + (c.parallel.overlap ? "on" : "off") + " bucket_mb:" + significant(c.parallel.bucket_mb) +
           " param_checksum:" + (world.size > 1 ? "equal on all ranks" : "single rank"));
  log.line("val_tokens:" + std::to_string(evaluator.tokens()) + " iterations:" + std::to_string(c.train.iterations));

  TokenMatrix inputs("kgpt::train::inputs", batch, seq), targets("kgpt::train::targets", batch, seq);
  auto host_inputs = Kokkos::create_mirror_view(inputs);
  auto host_targets = Kokkos::create_mirror_view(targets);
  data::TokenBatch micro;
  TrainSummary summary;
  const std::string total = std::to_string(c.train.iterations);
  double training_seconds = resumed.training_seconds;
  const auto run_start = Clock::now();
  const model::GradientsReady ready = [&](std::size_t begin, std::size_t end) { averager->ready(exec, begin, end); };

  auto evaluate = [&](int step) {
    const Evaluation e = evaluator.run(exec, model, world.rank, world.size);
    log.line("step:" + std::to_string(step) + "/" + total + " val_loss:" + fixed(e.loss, 4) +
             " val_bpb:" + fixed(e.bpb, 4));
    summary.final_val_loss = e.loss;
    summary.final_val_bpb = e.bpb;
    if (history) history->append(io::ValRow{step, e.loss, e.bpb});
  };

  summary.steps = static_cast<int>(resumed.step);
  for (int step = static_cast<int>(resumed.step); step < c.train.iterations; ++step) {
    if (c.train.eval_every > 0 && step % c.train.eval_every == 0) evaluate(step);
    const auto start = Clock::now();
    model::zero_gradients(exec, model.parameters());
    averager->begin_step();
    double loss_sum = 0;
    for (int micro_step = 0; micro_step < plan.grad_accum_steps; ++micro_step) {
      const bool last = micro_step + 1 == plan.grad_accum_steps;
      averager->begin_micro_step(last);
      loader.next(micro);
      for (std::size_t i = 0; i < micro.inputs.size(); ++i) {
        host_inputs.data()[i] = micro.inputs[i];
        host_targets.data()[i] = micro.targets[i];
      }
      Kokkos::deep_copy(exec, inputs, host_inputs);
      Kokkos::deep_copy(exec, targets, host_targets);
      loss_sum += model.forward(exec, inputs, targets);
      model.backward(exec, backward_scale, last ? ready : model::GradientsReady{});
    }
    averager->finish(exec);
    // The logged loss is the mean over all ranks and micro-steps (contract, point 7).
    const double train_loss =
        (world.size > 1 ? parallel::sum(loss_sum) : loss_sum) / (plan.grad_accum_steps * plan.world_size);
    if (!std::isfinite(train_loss)) {
      throw parallel::AgreedFailure(ExitCode::failure,
                                    "step " + std::to_string(step + 1) + ": the train loss is " +
                                        fixed(train_loss, 4) + "; stopping",
                                    world.rank == 0);
    }
    const double grad_norm = optim::clip_gradients(exec, model.parameters().grads(), c.train.grad_clip_norm);
    const double multiplier = optim::lr_multiplier(c.train, step, training_seconds);
    optimizer.step(exec, step, multiplier);
    exec.fence();
    const double local_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // Stop decisions and the wall-clock schedule use the slowest rank's time, the same on all ranks.
    const double seconds = world.size > 1 ? parallel::max(local_seconds) : local_seconds;
    training_seconds += seconds;
    summary.steps = step + 1;
    summary.final_train_loss = train_loss;
    const parallel::AveragingCounters& counted = averager->step_counters();
    summary.history.push_back({train_loss, counted.calls, counted.bytes, counted.calls_before_last_micro_step});
    tokens_seen += c.train.global_batch_tokens;
    if (history) {
      io::TrainRow row;
      row.step = step + 1;
      row.tokens = tokens_seen;
      row.loss = train_loss;
      row.lr_matrix = optimizer.group_lr(model::ParamGroup::matrix) * multiplier;
      row.lr_scalar = optimizer.group_lr(model::ParamGroup::scalar) * multiplier;
      row.lr_embedding = optimizer.group_lr(model::ParamGroup::embedding) * multiplier;
      row.lr_head = optimizer.group_lr(model::ParamGroup::head) * multiplier;
      row.grad_norm = grad_norm;
      row.step_ms = seconds * 1e3;
      row.tokens_per_s = static_cast<double>(c.train.global_batch_tokens) / seconds;
      row.allreduce_calls = counted.calls;
      row.allreduce_bytes = counted.bytes;
      row.wall_time_s = std::chrono::duration<double>(Clock::now() - run_start).count();
      history->append(row);
    }
    const bool last = step + 1 == c.train.iterations;
    const bool capped = c.train.max_wallclock_seconds > 0 && training_seconds >= c.train.max_wallclock_seconds;
    if (step == 0 || last || capped || (step + 1) % c.train.log_every == 0) {
      log.line("step:" + std::to_string(step + 1) + "/" + total + " train_loss:" + fixed(train_loss, 4) +
               " lr:" + significant(optimizer.group_lr(model::ParamGroup::matrix) * multiplier) +
               " step_ms:" + fixed(seconds * 1e3, 1) +
               " tok/s:" + fixed(static_cast<double>(c.train.global_batch_tokens) / seconds, 0) +
               " allreduce_calls:" + std::to_string(counted.calls) + " allreduce_bytes:" +
               std::to_string(counted.bytes) + " allreduce_ms:" + fixed(counted.seconds * 1e3, 1) +
               (counted.calls_before_last_micro_step > 0
                    ? " allreduce_calls_before_last_micro_step:" + std::to_string(counted.calls_before_last_micro_step)
                    : ""));
    }
    if (world.size > 1 && c.parallel.check_every > 0 && (step + 1) % c.parallel.check_every == 0) {
      check_parameters_agree(values, "after step " + std::to_string(step + 1));
    }
    // Signals reach each rank on its own: all act on them at the same step.
    double requests[2] = {signals.requested() ? 1.0 : 0.0, signals.take_checkpoint_request() ? 1.0 : 0.0};
    if (world.size > 1) parallel::sum_in_place(requests, 2);
    const bool preempt = requests[0] > 0, checkpoint_requested = requests[1] > 0;
    if (preempt) {
      save_checkpoint(step + 1, training_seconds);
      log.line("preempted: signal " + std::to_string(signals.which()) + " step:" + std::to_string(step + 1) + "/" +
               total + "; checkpoint written, exit code 3 (resume with --resume)");
      summary.preempted = true;
      return summary;
    }
    const bool scheduled = c.run.checkpoint_every > 0 && (step + 1) % c.run.checkpoint_every == 0;
    if (scheduled || last || capped || checkpoint_requested) save_checkpoint(step + 1, training_seconds);
    if (capped && !last) {
      log.line("stopping_early: wallclock_cap train_time:" + fixed(training_seconds, 1) + "s step:" +
               std::to_string(step + 1) + "/" + total);
      break;
    }
  }
  evaluate(summary.steps);
  if (options.final_parameters) *options.final_parameters = to_host(values);
  return summary;
}

}  // namespace

TrainSummary run_training(const config::ResolvedDeck& deck, io::RunLog& log, const TrainOptions& options) {
  if (deck.config.model.family == "gpt2") return train_model<model::Gpt2Model<Real>>(deck, log, options);
  return train_model<model::GolfModel<Real>>(deck, log, options);
}

}  // namespace kgpt::train
