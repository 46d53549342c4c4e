// kgpt inspect: what a checkpoint, an exported artifact or a history file holds, in a few lines.

#include <iostream>

#include "commands.hpp"
#include "io/describe.hpp"

namespace kgpt::app {

const CommandSpec& inspect_spec() {
  static const CommandSpec spec{
      "inspect",
      "FILE",
      "summarise a checkpoint, an exported artifact or a history.h5",
      "A checkpoint: its step, tokens, stream position, the versions and world size that wrote it,\n"
      "every tensor with its shape, type and L2 norm, and the optimizer state it holds. An artifact\n"
      "(kgpt export): its step, size, origin, and every tensor with its storage and the L2 norm of\n"
      "its dequantised values. A history: its rows, last and best losses and tokens/s. Reads a\n"
      "history while its run goes on.",
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
