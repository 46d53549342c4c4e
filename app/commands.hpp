#pragma once
// The subcommands of kgpt. Each has a spec (for parsing and --help) and a function that returns
// the exit code; errors are thrown and become messages and exit codes in main.cpp.

#include <string>
#include <vector>

#include "cli.hpp"
#include "config/deck.hpp"

namespace kgpt::app {

struct Command {
  const CommandSpec& spec;
  int (*run)(const ParsedArgs& args);
  bool runs_on_mpi_ranks = false;  // starts MPI (before Kokkos) and may run under mpiexec or srun
};

const CommandSpec& check_spec();
int run_check(const ParsedArgs& args);

const CommandSpec& prepare_spec();
int run_prepare(const ParsedArgs& args);

const CommandSpec& train_spec();
int run_train(const ParsedArgs& args);

const CommandSpec& tokenizer_spec();
int run_tokenizer(const ParsedArgs& args);

const CommandSpec& bench_spec();
int run_bench(const ParsedArgs& args);

const CommandSpec& eval_spec();
int run_eval(const ParsedArgs& args);

const CommandSpec& sample_spec();
int run_sample(const ParsedArgs& args);

const CommandSpec& export_spec();
int run_export(const ParsedArgs& args);

const CommandSpec& golf_check_spec();
int run_golf_check(const ParsedArgs& args);

const CommandSpec& inspect_spec();
int run_inspect(const ParsedArgs& args);

const CommandSpec& sweep_spec();
int run_sweep(const ParsedArgs& args);

// Reads the deck named by the first positional argument with the --set overrides, for `world_size`
// ranks (check and train share it).
config::ResolvedDeck load_deck_from_args(const ParsedArgs& args, int world_size);

// Every subcommand, in the order `kgpt --help` lists them.
const std::vector<Command>& commands();

// Multi-line description of this build: versions of kgpt and of every library it uses.
std::string version_text();

}  // namespace kgpt::app
