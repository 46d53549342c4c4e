// kgpt eval and kgpt sample: a checkpoint's val loss, and text generated from it.

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "core/error.hpp"
#include "parallel/world.hpp"
#include "train/from_checkpoint.hpp"

namespace kgpt::app {

const CommandSpec& eval_spec() {
  static const CommandSpec spec{
      "eval",
      "CKPT [--set section.key=value]...",
      "val loss and val_bpb of a checkpoint",
      "Rebuilds the model from the resolved deck stored in the checkpoint, loads it (checking its\n"
      "checksum, names and shapes) and evaluates it on the deck's val split (data.val_files,\n"
      "train.val_tokens; --set changes them). Under mpiexec or srun every rank takes a share of the\n"
      "val sequences; the result does not depend on the number of ranks. Prints one line:\n"
      "  checkpoint:PATH step:S val_loss:L val_bpb:B val_tokens:N",
      {{"set", "section.key=value", "override a key of the checkpoint's deck (repeatable)"}},
      1,
      1};
  return spec;
}

int run_eval(const ParsedArgs& args) {
  const std::string path = args.positional().at(0);
  config::ResolvedDeck deck;
  // Evaluation splits the val sequences over any number of ranks: the deck's batch plan is read for
  // one rank, whatever the world size.
  parallel::agreed([&] { deck = train::checkpoint_deck(path, args.all("set"), 1); });
  train::CheckpointEvaluation result;
  parallel::agreed([&] { result = train::evaluate_checkpoint(deck, path); });
  if (parallel::world().rank == 0) {
    char line[256];
    std::snprintf(line, sizeof(line), " step:%lld val_loss:%.6f val_bpb:%.6f val_tokens:%zu",
                  static_cast<long long>(result.step), result.loss, result.bpb, result.tokens);
    std::cout << "checkpoint:" << path << line << std::endl;
  }
  return 0;
}

const CommandSpec& sample_spec() {
  static const CommandSpec spec{
      "sample",
      "CKPT [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]",
      "generate text from a checkpoint",
      "Rebuilds the model from the checkpoint and continues TEXT one byte-token at a time, printing\n"
      "the prompt and then each new piece of text as it comes. Sampling draws from the softmax of\n"
      "the logits divided by T over the K most likely tokens (T = 0: always the most likely one);\n"
      "the same seed gives the same text. Stops after N new tokens or at the end of a document.\n"
      "Byte-tokenizer models only.",
      {
          {"prompt", "TEXT", "text to continue (default: none, a new document)"},
          {"max-new-tokens", "N", "tokens to generate at most (default 200)"},
          {"temperature", "T", "softmax temperature, >= 0 (default 1)"},
          {"top-k", "K", "sample among the K most likely tokens; 0 means all (default 0)"},
          {"seed", "S", "seed of the sampler (default 1)"},
      },
      1,
      1};
  return spec;
}

int run_sample(const ParsedArgs& args) {
  const std::string path = args.positional().at(0);
  train::SampleOptions options;
  options.prompt = args.get("prompt");
  options.max_new_tokens = static_cast<int>(int_option(args, "max-new-tokens", options.max_new_tokens, 0, 1 << 24));
  options.temperature = double_option(args, "temperature", options.temperature);
  if (!(options.temperature >= 0)) throw InputError("--temperature: must be >= 0");
  options.top_k = static_cast<int>(int_option(args, "top-k", options.top_k, 0, 1 << 20));
  options.seed = static_cast<std::uint64_t>(int_option(args, "seed", 1, 0, 1LL << 62));
  const config::ResolvedDeck deck = train::checkpoint_deck(path, {}, 1);
  std::cout << options.prompt << std::flush;
  train::sample_checkpoint(deck, path, options, [](const std::string& piece) { std::cout << piece << std::flush; });
  std::cout << std::endl;
  return 0;
}

}  // namespace kgpt::app
