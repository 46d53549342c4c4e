#pragma once
// What can be done with a checkpoint besides resuming: evaluate it on the val split (on every rank
// of the job) and generate text from it. Both rebuild the model from the resolved deck stored in
// the checkpoint and load it with load_checkpoint's checks.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/deck.hpp"

namespace kgpt::train {

// The resolved deck stored in the checkpoint at `path`, with `overrides` applied ("section.key=value").
config::ResolvedDeck checkpoint_deck(const std::string& path, const std::vector<std::string>& overrides,
                                     int world_size);

struct CheckpointEvaluation {
  std::int64_t step = 0;
  double loss = 0.0, bpb = 0.0;
  std::size_t tokens = 0;
};

// Collective: every rank evaluates its share of the val split.
CheckpointEvaluation evaluate_checkpoint(const config::ResolvedDeck& deck, const std::string& path);

struct SampleOptions {
  std::string prompt;
  int max_new_tokens = 200;
  double temperature = 1.0;  // 0: always the most likely token
  int top_k = 0;             // 0: all tokens
  std::uint64_t seed = 1;
};

// Continues the prompt one token at a time (byte tokenizer decks), handing each new piece of text to
// `emit`; stops after max_new_tokens or at a document boundary (token 256). Returns the new text.
std::string sample_checkpoint(const config::ResolvedDeck& deck, const std::string& path, const SampleOptions& options,
                              const std::function<void(const std::string&)>& emit);

}  // namespace kgpt::train
