// kgpt inspect: what a checkpoint, an exported artifact or a history file holds, in a few lines.

#include <iostream>

#include "commands.hpp"
#include "io/describe.hpp"

namespace kgpt::app {

const CommandSpec& inspect_spec() {
  static const CommandSpec spec{
      "inspect",
      "FILE|RUN_DIR",
      "summarise a run directory, a checkpoint, an exported artifact or a history.h5",
      "A run directory: its history's summary, its checkpoints with the newest one's step, and the\n"
      "last lines of its log, also while the run goes on. A checkpoint: its step, tokens, stream\n"
      "position, the versions and world size that wrote it, every tensor with its shape, type and L2\n"
      "norm, and the optimizer state it holds. An artifact (kgpt export): its step, size, origin, and\n"
      "every tensor with its storage and the L2 norm of its dequantised values. A history: its rows,\n"
      "last and best losses and tokens/s. Reads a history while its run goes on.",
      {},
      1,
      1};
  return spec;
}

int run_inspect(const ParsedArgs& args) {
  io::describe_file(args.positional().at(0), std::cout);
  return 0;
}

}  // namespace kgpt::app
