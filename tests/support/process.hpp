#pragma once
// Runs a program for real and captures its exit code, stdout and stderr.

#include <string>
#include <vector>

namespace kgpt::test {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when it was killed
  std::string out;
  std::string err;
};

// Runs `program` with `args` in `working_dir` ("" = the current folder).
ProcessResult run_process(const std::string& program, const std::vector<std::string>& args,
                          const std::string& working_dir = "");

// Runs the kgpt executable of this build.
ProcessResult run_kgpt(const std::vector<std::string>& args, const std::string& working_dir = "");

}  // namespace kgpt::test
