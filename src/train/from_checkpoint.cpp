#include "train/from_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/error.hpp"
#include "core/random.hpp"
#include "data/byte_tokenizer.hpp"
#include "io/hdf5_file.hpp"
#include "model/language_model.hpp"
#include "optim/optimizer.hpp"
#include "train/checkpoint.hpp"
#include "train/evaluator.hpp"

namespace kgpt::train {

namespace {

using Real = float;

// The deck's model (in the precision of its deck) built for `batch` sequences of `seq` tokens and
// loaded from the checkpoint; the checkpoint's step comes back through `step`.
std::unique_ptr<model::LanguageModel<Real>> loaded_model(const config::ResolvedDeck& deck, const std::string& path,
                                                          int batch, int seq, std::int64_t& step) {
  auto model = model::make_model<Real>(deck.config.model, batch, seq);
  // The optimizer state is read too: the checksum covers it.
  optim::Optimizer<Real> optimizer(model->parameters(), deck.config);
  step = load_checkpoint(path, model->parameters(), optimizer).step;
  return model;
}

}  // namespace

config::ResolvedDeck checkpoint_deck(const std::string& path, const std::vector<std::string>& overrides,
                                     int world_size) {
  std::string text;
  {
    io::Hdf5File file(path, io::Hdf5File::Mode::read);
    if (!file.contains("/metadata/deck")) throw InputError(path + ": not a kgpt checkpoint (no /metadata/deck)");
    text = file.read_string("/metadata/deck");
  }
  config::DeckOptions options;
  options.world_size = world_size;
  options.overrides = overrides;
  return config::load_deck_text(text, path + " (its deck)", options);
}

CheckpointEvaluation evaluate_checkpoint(const config::ResolvedDeck& deck, const std::string& path) {
  const auto& world = parallel::world();
  const int batch = static_cast<int>(deck.plan.local_sequences), seq = deck.config.train.seq_len;
  CheckpointEvaluation result;
  const auto model = loaded_model(deck, path, batch, seq, result.step);
  Evaluator evaluator(deck, batch);
  const Evaluation e = evaluator.run(ExecSpace(), *model, world.rank, world.size);
  result.loss = e.loss;
  result.bpb = e.bpb;
  result.tokens = evaluator.tokens();
  return result;
}

std::string sample_checkpoint(const config::ResolvedDeck& deck, const std::string& path, const SampleOptions& options,
                              const std::function<void(const std::string&)>& emit) {
  if (deck.config.data.tokenizer != config::Tokenizer::byte) {
    throw InputError(path + ": kgpt sample reads and writes text with the byte tokenizer; this model was trained "
                     "with data.tokenizer: " + config::name_of(deck.config.data.tokenizer));
  }
  const int seq = deck.config.train.seq_len, vocab = deck.config.model.vocab_size;
  std::vector<int> tokens = {data::kByteDocumentBoundary};
  for (unsigned char byte : options.prompt) tokens.push_back(byte);
  std::string generated;
  std::int64_t step = 0;
  const auto loaded = loaded_model(deck, path, 1, seq, step);
  model::LanguageModel<Real>& model = *loaded;
  {
    const ExecSpace exec;
    TokenMatrix inputs("kgpt::sample::inputs", 1, seq), targets("kgpt::sample::targets", 1, seq);
    auto host_inputs = Kokkos::create_mirror_view(inputs);
    std::vector<double> probabilities(static_cast<std::size_t>(vocab));
    std::vector<int> order(static_cast<std::size_t>(vocab));
    for (int i = 0; i < options.max_new_tokens; ++i) {
      // The newest seq tokens are the context: the model knows no positions beyond seq_len.
      const int length = std::min<int>(seq, static_cast<int>(tokens.size()));
      for (int t = 0; t < length; ++t) host_inputs(0, t) = tokens[tokens.size() - length + t];
      const TokenMatrix window(inputs.data(), 1, length), window_targets(targets.data(), 1, length);
      Kokkos::deep_copy(exec, window, Kokkos::subview(host_inputs, Kokkos::ALL(), std::make_pair(0, length)));
      model.forward(exec, window, window_targets);
      auto logits = Kokkos::create_mirror(model.logits());
      Kokkos::deep_copy(logits, model.logits());
      const int last = length - 1;
      int next = 0;
      if (options.temperature <= 0) {
        for (int v = 1; v < vocab; ++v) next = logits(last, v) > logits(last, next) ? v : next;
      } else {
        std::iota(order.begin(), order.end(), 0);
        const int keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
        std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                          [&](int a, int b) { return logits(last, a) > logits(last, b); });
        const double top = logits(last, order[0]);
        double total = 0;
        for (int k = 0; k < keep; ++k) {
          probabilities[k] = std::exp((logits(last, order[k]) - top) / options.temperature);
          total += probabilities[k];
        }
        double u = random::uniform(options.seed, 11, static_cast<std::uint64_t>(i)) * total;
        next = order[keep - 1];
        for (int k = 0; k < keep; ++k) {
          if ((u -= probabilities[k]) <= 0) {
            next = order[k];
            break;
          }
        }
      }
      if (next == data::kByteDocumentBoundary || next > 255) break;
      tokens.push_back(next);
      const std::string piece(1, static_cast<char>(next));
      generated += piece;
      emit(piece);
    }
  }
  return generated;
}

}  // namespace kgpt::train
