#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "data/dataset_check.hpp"
#include "data/loader.hpp"
#include "data/shard.hpp"
#include "data/token_bytes.hpp"
#include "model/golf.hpp"
#include "model/gpt2.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"

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

// The val split as one token array, cut to whole sequences (plus the one extra target token).
std::vector<std::uint16_t> load_val_tokens(const config::ResolvedDeck& deck) {
  const auto files = data::find_shards(deck.config.data.val_files);
  std::vector<std::uint16_t> tokens;
  for (const auto& file : files) {
    const auto shard = data::read_shard(file, deck.config.model.vocab_size);
    tokens.insert(tokens.end(), shard.begin(), shard.end());
  }
  const std::size_t seq = deck.config.train.seq_len;
  std::size_t usable = tokens.empty() ? 0 : (tokens.size() - 1) / seq * seq;
  if (deck.config.train.val_tokens > 0) {
    usable = std::min<std::size_t>(usable, static_cast<std::size_t>(deck.config.train.val_tokens) / seq * seq);
  }
  if (usable == 0) {
    throw InputError(deck.where("data.val_files") + ": the val split holds fewer than seq_len + 1 = " +
                     std::to_string(seq + 1) + " tokens");
  }
  tokens.resize(usable + 1);
  return tokens;
}

struct Evaluation {
  double loss = 0.0, bpb = 0.0;
};

class Evaluator {
 public:
  Evaluator(const config::ResolvedDeck& deck, int batch)
      : seq_(deck.config.train.seq_len),
        batch_(batch),
        tokens_(load_val_tokens(deck)),
        table_(deck.config.data.tokenizer == "byte"
                   ? data::byte_tokenizer_table(deck.config.model.vocab_size)
                   : data::load_sentencepiece_vocab(deck.config.data.vocab_file, deck.config.model.vocab_size)),
        inputs_("kgpt::eval::inputs", batch, seq_),
        targets_("kgpt::eval::targets", batch, seq_),
        host_inputs_(Kokkos::create_mirror_view(inputs_)),
        host_targets_(Kokkos::create_mirror_view(targets_)) {}

  template <class Model>
  Evaluation run(const ExecSpace& exec, Model& model) {
    const std::size_t sequences = (tokens_.size() - 1) / seq_;
    double loss_sum = 0, token_count = 0, byte_count = 0;
    for (std::size_t first = 0; first < sequences; first += batch_) {
      const int rows = static_cast<int>(std::min<std::size_t>(batch_, sequences - first));
      for (int r = 0; r < rows; ++r) {
        for (int t = 0; t < seq_; ++t) {
          const std::size_t at = (first + r) * seq_ + t;
          host_inputs_(r, t) = tokens_[at];
          host_targets_(r, t) = tokens_[at + 1];
          byte_count += table_.bytes(tokens_[at], tokens_[at + 1]);
        }
      }
      const TokenMatrix inputs(inputs_.data(), rows, seq_), targets(targets_.data(), rows, seq_);
      Kokkos::deep_copy(exec, inputs, Kokkos::subview(host_inputs_, std::make_pair(0, rows), Kokkos::ALL()));
      Kokkos::deep_copy(exec, targets, Kokkos::subview(host_targets_, std::make_pair(0, rows), Kokkos::ALL()));
      const double mean = model.forward(exec, inputs, targets);
      loss_sum += mean * rows * seq_;
      token_count += static_cast<double>(rows) * seq_;
    }
    Evaluation result;
    result.loss = loss_sum / token_count;
    result.bpb = data::bits_per_byte(result.loss, token_count, byte_count);
    return result;
  }

  std::size_t tokens() const { return tokens_.size() - 1; }

 private:
  int seq_, batch_;
  std::vector<std::uint16_t> tokens_;
  data::TokenByteTable table_;
  TokenMatrix inputs_, targets_;
  TokenMatrix::HostMirror host_inputs_, host_targets_;
};

template <class Model>
TrainSummary train_model(const config::ResolvedDeck& deck, io::RunLog& log) {
  const config::Config& c = deck.config;
  const config::BatchPlan& plan = deck.plan;
  const ExecSpace exec;
  const int batch = static_cast<int>(plan.local_sequences), seq = c.train.seq_len;
  Model model(c.model, batch, seq);
  model::initialize(model.parameters(), static_cast<std::uint64_t>(c.run.seed));
  optim::Optimizer<Real> optimizer(model.parameters(), c);
  data::DistributedLoader loader(data::TokenStream(data::find_shards(c.data.train_files), c.model.vocab_size), 0,
                                 plan.world_size, plan.local_tokens, seq);
  Evaluator evaluator(deck, batch);

  log.line("params:" + std::to_string(model.parameters().layout().parameter_count()) +
           " tokens_per_step:" + std::to_string(c.train.global_batch_tokens) +
           " grad_accum_steps:" + std::to_string(plan.grad_accum_steps) + " world_size:" + std::to_string(plan.world_size) +
           " backend:" + compat::enabled_backends() + " precision:fp32");
  log.line("val_tokens:" + std::to_string(evaluator.tokens()) + " iterations:" + std::to_string(c.train.iterations));

  TokenMatrix inputs("kgpt::train::inputs", batch, seq), targets("kgpt::train::targets", batch, seq);
  auto host_inputs = Kokkos::create_mirror_view(inputs);
  auto host_targets = Kokkos::create_mirror_view(targets);
  data::TokenBatch micro;
  TrainSummary summary;
  const std::string total = std::to_string(c.train.iterations);
  double training_seconds = 0;

  auto evaluate = [&](int step) {
    const Evaluation e = evaluator.run(exec, model);
    log.line("step:" + std::to_string(step) + "/" + total + " val_loss:" + fixed(e.loss, 4) +
             " val_bpb:" + fixed(e.bpb, 4));
    summary.final_val_loss = e.loss;
    summary.final_val_bpb = e.bpb;
  };

  for (int step = 0; step < c.train.iterations; ++step) {
    if (c.train.eval_every > 0 && step % c.train.eval_every == 0) evaluate(step);
    const auto start = Clock::now();
    model::zero_gradients(exec, model.parameters());
    double loss_sum = 0;
    for (int micro_step = 0; micro_step < plan.grad_accum_steps; ++micro_step) {
      loader.next(micro);
      for (std::size_t i = 0; i < micro.inputs.size(); ++i) {
        host_inputs.data()[i] = micro.inputs[i];
        host_targets.data()[i] = micro.targets[i];
      }
      Kokkos::deep_copy(exec, inputs, host_inputs);
      Kokkos::deep_copy(exec, targets, host_targets);
      loss_sum += model.forward(exec, inputs, targets);
      model.backward(exec, static_cast<Real>(plan.grad_scale));
    }
    const double train_loss = loss_sum / plan.grad_accum_steps;
    if (!std::isfinite(train_loss)) {
      throw Error(ExitCode::failure, "step " + std::to_string(step + 1) + ": the train loss is " +
                                         fixed(train_loss, 4) + "; stopping");
    }
    optim::clip_gradients(exec, model.parameters().grads(), c.train.grad_clip_norm);
    const double multiplier = optim::lr_multiplier(c.train, step, training_seconds);
    optimizer.step(exec, step, multiplier);
    exec.fence();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    training_seconds += seconds;
    summary.steps = step + 1;
    summary.final_train_loss = train_loss;
    const bool last = step + 1 == c.train.iterations;
    const bool capped = c.train.max_wallclock_seconds > 0 && training_seconds >= c.train.max_wallclock_seconds;
    if (step == 0 || last || capped || (step + 1) % c.train.log_every == 0) {
      log.line("step:" + std::to_string(step + 1) + "/" + total + " train_loss:" + fixed(train_loss, 4) +
               " lr:" + significant(optimizer.group_lr(model::ParamGroup::matrix) * multiplier) +
               " step_ms:" + fixed(seconds * 1e3, 1) +
               " tok/s:" + fixed(static_cast<double>(c.train.global_batch_tokens) / seconds, 0));
    }
    if (capped && !last) {
      log.line("stopping_early: wallclock_cap train_time:" + fixed(training_seconds, 1) + "s step:" +
               std::to_string(step + 1) + "/" + total);
      break;
    }
  }
  evaluate(summary.steps);
  return summary;
}

}  // namespace

TrainSummary run_training(const config::ResolvedDeck& deck, io::RunLog& log) {
  if (deck.config.model.family == "gpt2") return train_model<model::Gpt2Model<Real>>(deck, log);
  return train_model<model::GolfModel<Real>>(deck, log);
}

}  // namespace kgpt::train
