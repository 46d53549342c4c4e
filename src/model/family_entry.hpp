#pragma once
// What a family's registry entry (families/<name>/family.cpp) writes the same way as every other
// family's, from its model and activation templates: its models in each precision, the bytes of its
// activations, and the rules several families share.

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/deck.hpp"
#include "core/bf16.hpp"
#include "model/language_model.hpp"
#include "model/storage.hpp"

namespace kgpt::model::family_entry {

// Model<T, A>: float parameters with float or bf16 activations, as train.precision says.
template <template <class, class> class Model>
std::unique_ptr<LanguageModel<float>> make_float(const config::ModelConfig& m, int max_batch, int max_seq) {
  if (m.precision == config::Precision::bf16) return std::make_unique<Model<float, bf16>>(m, max_batch, max_seq);
  return std::make_unique<Model<float, float>>(m, max_batch, max_seq);
}

template <template <class, class> class Model>
std::unique_ptr<LanguageModel<double>> make_double(const config::ModelConfig& m, int max_batch, int max_seq) {
  return std::make_unique<Model<double, double>>(m, max_batch, max_seq);
}

// The bytes `declare(activations, counter, tokens)` names for the precision's activation type.
template <template <class, class> class Activations, class Declare>
std::size_t activation_bytes(const config::ModelConfig& m, int max_batch, int max_seq, const Declare& declare) {
  const std::size_t tokens = static_cast<std::size_t>(max_batch) * max_seq;
  ActivationCounter counter(tokens);
  if (m.precision == config::Precision::bf16) {
    Activations<float, bf16> scratch;
    declare(scratch, counter, tokens);
  } else {
    Activations<float, float> scratch;
    declare(scratch, counter, tokens);
  }
  return counter.bytes();
}

// RoPE rotates pairs of a head's features: the head dimension must be even.
inline void check_rope_head_dim(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::ModelConfig& m = deck.config.model;
  if (m.d_model % m.n_head == 0 && (m.d_model / m.n_head) % 2 != 0) {
    problems.push_back(deck.where("model.d_model") + ": the head dimension d_model / n_head = " +
                       std::to_string(m.d_model / m.n_head) + " must be even for RoPE (model.n_head = " +
                       std::to_string(m.n_head) + " (" + deck.origin("model.n_head").describe() + "))");
  }
}

// Depth recurrence (model.recur_start, model.recur_count; model/block_sequence.hpp) repeats blocks
// that exist. Every family runs its blocks through the model base's loop, so every family reads the
// two keys and checks them here.
inline void check_recurrence(const config::ResolvedDeck& deck, std::vector<std::string>& problems) {
  const config::ModelConfig& m = deck.config.model;
  if (m.recur_start >= 0 && m.recur_start + m.recur_count > m.n_layer) {
    problems.push_back(deck.where("model.recur_start") + ": blocks " + std::to_string(m.recur_start) + " to " +
                       std::to_string(m.recur_start + m.recur_count - 1) + " (model.recur_count = " +
                       std::to_string(m.recur_count) + " (" + deck.origin("model.recur_count").describe() +
                       ")) run twice, but the blocks are 0 to " + std::to_string(m.n_layer - 1) + " (model.n_layer = " +
                       std::to_string(m.n_layer) + " (" + deck.origin("model.n_layer").describe() + ")); -1 repeats none");
  }
}
inline const char* const kRecurrenceKeys[] = {"model.recur_start", "model.recur_count"};
inline const char* const kRecurrenceRule = "model.recur_start + model.recur_count is at most model.n_layer";

}  // namespace kgpt::model::family_entry
