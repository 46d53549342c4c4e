// kgpt: trains GPT language models from a YAML input deck. This file turns the command line into
// a subcommand call, and errors into one message and an exit code.

#include <algorithm>
#include <csignal>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/blas.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/text.hpp"
#include "parallel/world.hpp"

namespace kgpt::app {

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {train_spec(), run_train, true},
      {check_spec(), run_check},
      {tokenizer_spec(), run_tokenizer},
      {prepare_spec(), run_prepare, true},
      {bench_spec(), run_bench, true},
      {eval_spec(), run_eval, true},
      {sample_spec(), run_sample},
      {export_spec(), run_export},
      {golf_check_spec(), run_golf_check, true},
      {inspect_spec(), run_inspect},
      {sweep_spec(), run_sweep},
  };
  return all;
}

}  // namespace kgpt::app

namespace {

void print_overview(std::ostream& out) {
  out << "usage: kgpt COMMAND [ARGS]...\n"
         "       kgpt --version | --help | help COMMAND\n\n"
         "Trains GPT language models from a YAML input deck on MPI ranks.\n\ncommands:\n";
  std::size_t width = 0;  // the longest name, then two spaces
  for (const auto& command : kgpt::app::commands()) width = std::max(width, command.spec.name.size());
  for (const auto& command : kgpt::app::commands()) {
    std::string name = "  " + command.spec.name;
    name.append(width + 4 - name.size(), ' ');
    out << name << command.spec.summary << "\n";
  }
  out << "\nexit codes: 0 success, 1 failure during a run, 2 bad input (deck, options, data files),\n"
         "3 preempted (SIGUSR1 or SIGTERM): a checkpoint was written; requeue with --resume,\n"
         "4 stalled: a rank made no progress for parallel.stall_timeout_s (or stopped answering) and the\n"
         "  watchdog ended the job, naming the rank, step and phase; the newest checkpoint is intact.\n"
         "Every deck key is documented in docs/deck-reference.md (or: kgpt check --reference).\n"
         "`kgpt COMMAND --help` describes each command.\n";
}

const kgpt::app::Command* find_command(const std::string& name) {
  for (const auto& command : kgpt::app::commands()) {
    if (command.spec.name == name) return &command;
  }
  return nullptr;
}

std::string unknown_command(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& command : kgpt::app::commands()) names.push_back(command.spec.name);
  const std::string best = kgpt::text::closest_match(name, names);
  return "unknown command '" + name + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)") +
         "; see kgpt --help";
}

void report(const std::string& who, const std::string& message) {
  std::size_t start = 0;
  while (start <= message.size()) {
    const std::size_t end = message.find('\n', start);
    std::cerr << who << ": error: " << message.substr(start, end - start) << "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

// Each rank drives GPU local_rank (docs/design.md, section 1).
int device_for_this_rank() {
  const auto& w = kgpt::parallel::world();
  const int devices = kgpt::compat::device_count();
  if (devices < 0) return -1;
  if (w.local_rank >= devices) {
    throw kgpt::Error(kgpt::ExitCode::failure,
                      kgpt::parallel::rank_name(w.rank) + ": this node runs " + std::to_string(w.local_size) +
                          " ranks but shows " + std::to_string(devices) +
                          " CUDA devices; local rank " + std::to_string(w.local_rank) + " has no device");
  }
  return w.local_rank;
}

// Runs a command on every MPI rank. Failures that all ranks agreed on end every rank normally with
// one message; any other failure on a rank of a multi-rank job is reported with the rank and ends
// the whole job (MPI_Abort), so no rank waits forever in a collective.
int run_on_ranks(const kgpt::app::Command& command, const kgpt::app::ParsedArgs& parsed, const std::string& who) {
  const auto& w = kgpt::parallel::world();
  try {
    int device = -1;
    kgpt::parallel::agreed([&] {
      const std::string mismatch = kgpt::parallel::slurm_world_mismatch(w.size);
      if (!mismatch.empty()) throw kgpt::Error(kgpt::ExitCode::failure, mismatch);
      device = device_for_this_rank();
    });
    kgpt::compat::Runtime kokkos(device);
    return command.run(parsed);
  } catch (const kgpt::parallel::AgreedFailure& e) {
    if (e.report_here()) report(who, e.what());
    return static_cast<int>(e.code());
  } catch (const kgpt::Error& e) {
    if (w.size == 1) throw;
    report(who, kgpt::parallel::rank_name(w.rank) + ": " + e.what());
    kgpt::parallel::abort_all(static_cast<int>(e.code()));
  } catch (const std::exception& e) {
    if (w.size == 1) throw;
    report(who, kgpt::parallel::rank_name(w.rank) + ": internal error: " + e.what());
    kgpt::parallel::abort_all(static_cast<int>(kgpt::ExitCode::failure));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else, on every rank: OpenBLAS reads OPENBLAS_CORETYPE when it loads, so where it
  // chose a kernel below this CPU's vector units this sets it and runs kgpt again (core/blas.hpp).
  kgpt::choose_blas_kernel(argv);
  // A write past the file size limit (ulimit -f) then fails with EFBIG and is reported with the
  // file's name, instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  // A write to a pipe or socket whose reader is gone (`kgpt train ... | head`, an MPI peer's closed
  // connection) then fails with EPIPE, which the writer reports, instead of killing the rank without
  // a word: the run goes on (log.txt keeps every line) or ends with a message naming the rank.
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::string who = "kgpt";
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      print_overview(args.empty() ? std::cerr : std::cout);
      return args.empty() ? static_cast<int>(kgpt::ExitCode::bad_input) : 0;
    }
    if (args[0] == "--version" || args[0] == "version") {
      std::cout << kgpt::app::version_text();
      return 0;
    }
    if (args[0] == "help") {
      if (args.size() == 1) {
        print_overview(std::cout);
        return 0;
      }
      const auto* command = find_command(args[1]);
      if (!command) throw kgpt::InputError(unknown_command(args[1]));
      std::cout << kgpt::app::command_help(command->spec);
      return 0;
    }
    const auto* command = find_command(args[0]);
    if (!command) throw kgpt::InputError(unknown_command(args[0]));
    who = "kgpt " + command->spec.name;
    const auto parsed = kgpt::app::parse_args(command->spec, {args.begin() + 1, args.end()});
    if (parsed.has("help")) {
      std::cout << kgpt::app::command_help(command->spec);
      return 0;
    }
    if (!command->runs_on_mpi_ranks) {
      // One Kokkos runtime for the whole process, started once the command line is known to be good.
      kgpt::compat::Runtime kokkos;
      return command->run(parsed);
    }
    kgpt::parallel::MpiSession mpi(&argc, &argv);
    return run_on_ranks(*command, parsed, who);
  } catch (const kgpt::Error& e) {
    report(who, e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    report(who, std::string("internal error: ") + e.what());
    return static_cast<int>(kgpt::ExitCode::failure);
  }
}
