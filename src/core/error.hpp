#pragma once
// Errors carry their context (deck key and line:column, file, rank) in the message and an exit
// code; app/main.cpp turns them into one stderr message and the process exit status.

#include <stdexcept>
#include <string>
#include <vector>

namespace kgpt {

enum class ExitCode : int {
  success = 0,
  failure = 1,    // a run that failed after its inputs were accepted
  bad_input = 2,  // a bad deck, command line, or data file: nothing was trained or overwritten
  preempted = 3,  // stopped by SIGUSR1 or SIGTERM after writing a checkpoint: requeue and resume
  stalled = 4,    // a rank made no progress for parallel.stall_timeout_s: the watchdog ended the job
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Bad input of any kind. Holds one or more problems, one per line of what(), so a deck with
// several mistakes reports all of them at once.
class InputError : public Error {
 public:
  explicit InputError(const std::string& problem) : InputError(std::vector<std::string>{problem}) {}
  explicit InputError(std::vector<std::string> problems)
      : Error(ExitCode::bad_input, join(problems)), problems_(std::move(problems)) {}
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  static std::string join(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& line : lines) text += (text.empty() ? "" : "\n") + line;
    return text;
  }
  std::vector<std::string> problems_;
};

}  // namespace kgpt
