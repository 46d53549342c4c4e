#include "io/run_log.hpp"

#include <cerrno>
#include <cstring>
#include <iostream>

#include "core/error.hpp"

namespace kgpt::io {

RunLog::RunLog(const std::string& dir) : path_(dir + "/log.txt"), file_(path_, std::ios::app) {
  if (!file_) throw Error(ExitCode::failure, path_ + ": cannot open the run log: " + std::strerror(errno));
}

void RunLog::line(const std::string& text) {
  if (silent()) return;
  std::cout << text << std::endl;
  errno = 0;
  file_ << text << std::endl;
  if (!file_) {
    const int error = errno;
    throw Error(ExitCode::failure, path_ + ": cannot write the run log" + (error ? std::string(": ") + std::strerror(error) : ""));
  }
}

void RunLog::record_error(const std::string& message) noexcept {
  if (silent() || message.empty()) return;
  try {
    file_.clear();
    file_ << "error: " << message << std::endl;
  } catch (...) {
  }
}

}  // namespace kgpt::io
