#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/kokkos_compat.hpp"
#include "core/text.hpp"
#include "data/loader.hpp"
#include "data/shard.hpp"
#include "io/event_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/history.hpp"
#include "model/language_model.hpp"
#include "optim/optimizer.hpp"
#include "features/registry.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"
#include "io/checkpoint.hpp"
#include "inference/evaluator.hpp"
#include "inference/hf.hpp"
#include "train/blas_report.hpp"
#include "train/progress.hpp"
#include "train/signals.hpp"
#include "train/step.hpp"

namespace kgpt::train {

namespace {

using Clock = std::chrono::steady_clock;
using Real = float;  // parameters, gradients and optimizer state

using text::significant;

// Equal on every rank when the parameters are.
std::uint64_t parameter_checksum(const Vector<Real>& values) {
  const std::vector<Real> host = to_host(values);
  Checksum sum;
  sum.add(host.data(), host.size() * sizeof(Real));
  return sum.value;
}

// Throws AgreedFailure on every rank when some rank's parameters differ from rank 0's.
void check_parameters_agree(const Vector<Real>& values, const std::string& when) {
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

// Same seed on every rank, then rank 0's values everywhere (docs/design.md, section 6).
void broadcast_parameters(const Vector<Real>& values) {
  std::vector<Real> host = to_host(values);
  parallel::broadcast_from_root(host.data(), host.size() * sizeof(Real));
  from_host(host, values);
}

// This rank's micro-batches from the distributed loader (docs/design.md, section 4).
class LoaderBatches final : public BatchSource {
 public:
  explicit LoaderBatches(data::DistributedLoader& loader) : loader_(loader) {}

  void next(int* inputs, int* targets) override {
    loader_.next(batch_);
    std::copy(batch_.inputs.begin(), batch_.inputs.end(), inputs);
    std::copy(batch_.targets.begin(), batch_.targets.end(), targets);
  }

 private:
  data::DistributedLoader& loader_;
  data::TokenBatch batch_;
};

// Everything a run needs besides the loop, made on every rank; a failure on any rank is agreed.
struct Run {
  inference::InitWeights init;  // model.init_from's file and checksum (its values are dropped once loaded)
  std::unique_ptr<model::LanguageModel<Real>> model;
  std::unique_ptr<optim::Optimizer<Real>> optimizer;
  features::StepFeatures features;  // features/registry.hpp
  std::unique_ptr<data::DistributedLoader> loader;
  std::unique_ptr<inference::Evaluator> evaluator;
  std::vector<inference::Task> tasks;  // data.task_files
};

Run build_run(const config::ResolvedDeck& deck, bool resume, inference::InitWeights* init_weights,
              const std::vector<inference::Task>* tasks) {
  const config::Config& c = deck.config;
  const int batch = static_cast<int>(deck.plan.local_sequences);
  Run run;
  parallel::agreed([&] {
    run.model = model::make_model<Real>(c.model, batch, c.train.seq_len);
    if (!c.model.init_from.empty() && !resume) {
      // Every rank reads the file (a failure is agreed); rank 0's copy is broadcast anyway.
      run.init = init_weights != nullptr ? std::move(*init_weights) : inference::read_init_weights(deck);
      const Vector<Real>& values = run.model->parameters().values();
      const Kokkos::View<const Real*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> loaded(
          run.init.values.data(), run.init.values.size());
      Kokkos::deep_copy(values, loaded);
      run.init.values = {};
    } else {
      model::initialize(run.model->parameters(), static_cast<std::uint64_t>(c.run.seed));
    }
    run.optimizer = std::make_unique<optim::Optimizer<Real>>(
        run.model->parameters(), c, optimizer_shard(deck, run.model->parameters().layout()),
        work_sharing(deck, parallel::world().rank));
    run.features = features::make_step_features(c, run.model->parameters().layout());
    run.loader = std::make_unique<data::DistributedLoader>(
        data::TokenStream(data::find_shards(c.data.train_files), c.model.vocab_size), parallel::world().rank,
        deck.plan.world_size, deck.plan.local_tokens, c.train.seq_len);
    run.evaluator = std::make_unique<inference::Evaluator>(deck, batch);
    run.tasks = tasks != nullptr ? *tasks : inference::deck_tasks(deck);
  });
  return run;
}

// Every rank reads the checkpoint itself; the newest one that loads wins. A checkpoint of another
// model than the deck's ends the run instead: its weights would load, or fail to, for the wrong reason.
io::CheckpointState resume_from_newest(const config::ResolvedDeck& deck, const std::string& run_dir, Run& run,
                                       io::RunLog& log, std::string& from) {
  io::CheckpointState resumed;
  parallel::agreed([&] {
    std::string problems;
    for (const std::string& path : io::list_checkpoints(run_dir)) {
      std::string changed;
      try {
        changed = io::model_change(path, deck);
        if (changed.empty()) {
          io::FeatureState features = features::wanted_state(run.features);
          resumed = io::load_checkpoint(path, run.model->parameters(), *run.optimizer, &features);
          features::restore_state(run.features, path, features);
          from = path;
          log.line("resumed_from:" + path + " step:" + std::to_string(resumed.step));
          return;
        }
      } catch (const Error& e) {
        log.line(std::string("skipping_checkpoint: ") + e.what());
        problems += std::string("\n  ") + e.what();
        continue;
      }
      throw InputError(changed);
    }
    throw InputError(io::checkpoint_folder(run_dir) + ": no checkpoint to resume from" +
                     (problems.empty() ? " (the folder holds none)" : ":" + problems));
  });
  run.loader->stream().seek(resumed.stream_position);
  return resumed;
}

bool every(int interval, int step) { return interval > 0 && step % interval == 0; }

}  // namespace

TrainSummary run_training(const config::ResolvedDeck& deck, io::RunLog& log, const TrainOptions& options) {
  const config::Config& c = deck.config;
  const config::BatchPlan& plan = deck.plan;
  const parallel::WorldInfo& world = parallel::world();
  const ExecSpace exec;
  parallel::WatchdogSettings watch;
  watch.timeout_seconds = c.parallel.stall_timeout_s;
  watch.who = "kgpt train";
  watch.log_file = log.path();
  const parallel::StallWatchdog watchdog(watch);
  Run run = build_run(deck, options.resume, options.init_weights, options.tasks);
  model::LanguageModel<Real>& model = *run.model;
  const Vector<Real>& values = model.parameters().values();
  io::CheckpointState resumed;
  if (options.resume) {
    std::string from;
    resumed = resume_from_newest(deck, options.run_dir, run, log, from);
    if (resumed.step >= c.train.iterations) {
      // A finished run resumed as it was: say how to train on rather than end without a word.
      log.line("note: " + from + " is at step " + std::to_string(resumed.step) + " and train.iterations is " +
               std::to_string(c.train.iterations) + ", so no step is left; to train on, resume with a larger "
               "count (--set train.iterations=N --resume): the schedule then follows N, its warmdown included");
    }
    if (!c.model.init_from.empty()) {
      // The run started from model.init_from: the record of that file carries over.
      try {
        const io::Hdf5File checkpoint(from, io::Hdf5File::Mode::read);
        run.init.file = checkpoint.read_attribute_string("/metadata", "init_from");
        run.init.checksum = checkpoint.read_attribute_string("/metadata", "init_from_fnv1a64");
      } catch (const Error&) {
        // A checkpoint written before kgpt recorded it.
      }
    }
  }
  broadcast_parameters(values);
  check_parameters_agree(values, "at the start");
  // A new run's features (its EMA) start from the weights every rank now holds; a resumed run's were
  // read back.
  if (!options.resume) {
    for (const auto& feature : run.features) feature->start(exec, values);
  }

  io::RunMetadata metadata;
  metadata.deck_text = config::render_resolved(deck);
  metadata.deck_path = deck.path;
  metadata.run_dir = options.run_dir;
  metadata.world_size = world.size;
  metadata.init_from = run.init.file;
  metadata.init_from_checksum = run.init.checksum;
  metadata.iterations = c.train.iterations;
  for (const inference::Task& task : run.tasks) metadata.task_names.push_back(task.name);
  if (!run.init.file.empty() && !options.resume) {
    std::string cropped;
    for (const std::string& table : run.init.cropped) cropped += (cropped.empty() ? "" : ",") + table;
    log.line("init_from:" + run.init.file + " tensors:" + std::to_string(run.init.tensors) +
             " fnv1a64:" + run.init.checksum + (cropped.empty() ? "" : " positions_cropped:" + cropped));
  }
  const bool writes_files = world.rank == 0 && !options.run_dir.empty();
  // TensorBoard's event files: a resumed run cuts the earlier ones back to its checkpoint, as the
  // history is (first, so that a damaged file stops the run before the history is cut), and goes on
  // in a new one; a new run replaces any.
  std::unique_ptr<io::EventFile> events;
  // With run.tensorboard off the earlier files are cut or removed all the same: none is left
  // holding steps the run no longer has.
  parallel::agreed([&] {
    if (!writes_files) return;
    if (options.resume) {
      io::cut_event_files(options.run_dir, resumed.step);
    } else {
      io::remove_event_files(options.run_dir);
    }
    if (c.run.tensorboard) events = std::make_unique<io::EventFile>(options.run_dir, options.resume ? resumed.step + 1 : 0);
  });
  std::unique_ptr<io::History> history;
  if (writes_files) {
    const std::string path = options.run_dir + "/history.h5";
    history = std::make_unique<io::History>(options.resume && std::ifstream(path).good()
                                                ? io::History::resume(path, resumed.step, metadata)
                                                : io::History::create(path, metadata));
  }
  io::CheckpointPolicy keep;
  keep.keep_last = c.run.checkpoint_keep_last;
  keep.keep_every = c.run.checkpoint_keep_every;
  std::int64_t tokens_seen = resumed.tokens_seen;
  double training_seconds = resumed.training_seconds;
  // Every rank waits for rank 0's write, so that none exits or goes on before the checkpoint is on
  // disk, and a failed write ends every rank with rank 0's message.
  const std::vector<optim::Shard> shards = optimizer_shards(deck, model.parameters().layout());
  auto save_checkpoint = [&](int steps_done) {
    parallel::progress(parallel::Phase::checkpoint, steps_done);
    // Under zero stage 1 every rank sends its shard of the optimizer's state to rank 0 first; at
    // stage 0 only the rank that writes copies it to the host.
    const bool gathers = !options.run_dir.empty() && (shards.size() > 1 || writes_files);
    const io::HostState optimizer_state =
        gathers ? io::checkpoint_state(*run.optimizer, shards, model.parameters().layout().buffer_size()) : io::HostState{};
    parallel::agreed([&] {
      if (!writes_files) return;
      io::CheckpointState state;
      state.step = steps_done;
      state.tokens_seen = tokens_seen;
      state.stream_position = run.loader->stream().tokens_consumed();
      state.training_seconds = training_seconds;
      state.seed = c.run.seed;
      const std::string path = io::write_checkpoint(options.run_dir, model.parameters(), optimizer_state, state, metadata,
                                                    keep, features::saved_state(run.features));
      log.line("checkpoint:" + path + " step:" + std::to_string(steps_done));
    });
  };

  TrainStep<Real> train_step(model, *run.optimizer, deck, world.size, run.features);
  LoaderBatches batches(*run.loader);
  ProgressReport report(log, history.get(), events.get(), c, *run.optimizer, metadata.task_names);
  PreemptionSignals signals;
  log.line("params:" + std::to_string(model.parameters().layout().parameter_count()) +
           " tokens_per_step:" + std::to_string(c.train.global_batch_tokens) +
           " grad_accum_steps:" + std::to_string(plan.grad_accum_steps) + " world_size:" + std::to_string(plan.world_size) +
           " backend:" + compat::enabled_backends() + " precision:" + config::name_of(c.model.precision) +
           " fp8:" + config::name_of(c.model.fp8));
  log.line("grad_averaging:" + std::string(train_step.averager().transport()) +
           " overlap:" + (c.parallel.overlap ? "on" : "off") + " bucket_mb:" + significant(c.parallel.bucket_mb) +
           " param_checksum:" + (world.size > 1 ? "equal on all ranks" : "single rank"));
  log.line(blas_report());
  log.line("val_tokens:" + std::to_string(run.evaluator->tokens()) + " eval_windows:" +
           std::to_string(run.evaluator->windows()) + " iterations:" + std::to_string(c.train.iterations) +
           " stall_watchdog:" + watchdog.summary());

  TrainSummary summary;
  // The weights an evaluation scored, for the log and history: "" when the deck asks for the live
  // ones; the average, or "live" before it stands for a model.
  const auto scored_label = [&](const features::EvaluatedWeights& scored) -> std::string {
    return c.train.eval_weights == config::Weights::live ? "" : config::name_of(scored.weights());
  };
  auto evaluate = [&](int step) {
    parallel::progress(parallel::Phase::evaluation, step);
    const features::EvaluatedWeights scored(run.features, exec, c.train.eval_weights, values);
    const inference::Evaluation e = run.evaluator->run(exec, model, world.rank, world.size);
    report.evaluation(step, e, scored_label(scored));
    summary.final_val_loss = e.loss;
    summary.final_val_bpb = e.bpb;
  };
  // data.task_files, with the weights evaluate scores; the model's micro-batch holds an example's
  // endings, several micro-batches when it has more.
  auto score_tasks = [&](int step) {
    if (run.tasks.empty()) return;
    parallel::progress(parallel::Phase::evaluation, step);
    const features::EvaluatedWeights scored(run.features, exec, c.train.eval_weights, values);
    for (std::size_t i = 0; i < run.tasks.size(); ++i) {
      const inference::TaskResult t = inference::score_task(exec, model, run.tasks[i], static_cast<int>(plan.local_sequences),
                                                            c.train.seq_len, world.rank, world.size);
      report.task(step, static_cast<int>(i), t, scored_label(scored));
    }
  };
  const auto run_start = Clock::now();
  summary.steps = static_cast<int>(resumed.step);
  for (int step = summary.steps; step < c.train.iterations; ++step) {
    if (every(c.train.eval_every, step)) evaluate(step);
    if (every(c.train.task_eval_every, step)) score_tasks(step);
    const StepMetrics m = train_step.run(exec, step, training_seconds, batches);
    for (const std::string& note : m.notes) log.line(note);
    training_seconds += m.seconds;
    tokens_seen += c.train.global_batch_tokens;
    const int done = step + 1;
    const bool last = done == c.train.iterations;
    const bool capped = c.train.max_wallclock_seconds > 0 && training_seconds >= c.train.max_wallclock_seconds;
    parallel::progress(parallel::Phase::output, done);
    report.step(done, m, tokens_seen, std::chrono::duration<double>(Clock::now() - run_start).count(), training_seconds,
                last || capped);
    summary.steps = done;
    summary.final_train_loss = m.loss;
    summary.history.push_back(
        {m.loss, m.grad_norm, m.averaging.calls, m.averaging.bytes, m.averaging.calls_before_last_micro_step,
         m.averaging.gather_calls, m.averaging.gather_bytes});
    if (every(c.parallel.check_every, done)) check_parameters_agree(values, "after step " + std::to_string(done));
    // Signals reach each rank on its own: all act on them at the same step.
    double requests[2] = {signals.requested() ? 1.0 : 0.0, signals.take_checkpoint_request() ? 1.0 : 0.0};
    parallel::sum_in_place(requests, 2);
    if (requests[0] > 0) {
      save_checkpoint(done);
      log.line("preempted: signal " + std::to_string(signals.which()) + " step:" + std::to_string(done) + "/" +
               std::to_string(c.train.iterations) + "; checkpoint written, exit code 3 (resume with --resume)");
      summary.preempted = true;
      return summary;
    }
    if (every(c.run.checkpoint_every, done) || last || capped || requests[1] > 0) save_checkpoint(done);
    if (capped && !last) {
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.1f", training_seconds);
      log.line("stopping_early: wallclock_cap train_time:" + std::string(seconds) + "s step:" + std::to_string(done) +
               "/" + std::to_string(c.train.iterations));
      break;
    }
  }
  evaluate(summary.steps);
  score_tasks(summary.steps);
  if (options.final_parameters) *options.final_parameters = to_host(values);
  return summary;
}

}  // namespace kgpt::train
