// kgpt inspect: what a checkpoint, an exported artifact, a history file or a token shard holds, in a few lines.

#include <iostream>

#include "commands.hpp"
#include "data/shard_peek.hpp"
#include "io/describe.hpp"

namespace kgpt::app {

const CommandSpec& inspect_spec() {
  static const CommandSpec spec{
      "inspect",
      "FILE|RUN_DIR",
      "summarise a run directory, a checkpoint, an exported artifact, a history.h5 or a token shard",
      "A run directory: its history's summary, its checkpoints with the newest one's step, and the\n"
      "last lines of its log, also while the run goes on. A checkpoint: its step, tokens, stream\n"
      "position, the versions and world size that wrote it, every tensor with its shape, type and L2\n"
      "norm, and the optimizer state it holds. An artifact (kgpt export): its step, size, origin, and\n"
      "every tensor with its storage and the L2 norm of its dequantised values. A history: its rows,\n"
      "last and best losses and tokens/s. Reads a history while its run goes on. A token shard: its\n"
      "tokens, id range and documents, and its first 64 tokens as text, decoded with the tokenizer\n"
      "that the <prefix>_prepare.yaml beside it records (kgpt prepare writes it).",
      {},
      1,
      1};
  return spec;
}

int run_inspect(const ParsedArgs& args) {
  const std::string& path = args.positional().at(0);
  if (data::is_shard_file(path)) {
    data::describe_shard(path, std::cout);
  } else {
    io::describe_file(path, std::cout);
  }
  return 0;
}

}  // namespace kgpt::app
