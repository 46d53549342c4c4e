#pragma once
// The run log: every line goes to stdout and to <run dir>/log.txt, flushed at once so that a
// crash keeps what was written and `tail -f` follows the run. Only rank 0 writes: the other ranks
// hold a silent log (default-constructed) and the same code runs on every rank.

#include <fstream>
#include <string>

namespace kgpt::io {

class RunLog {
 public:
  // Appends to <dir>/log.txt. Throws Error(failure) naming the file when it cannot be opened.
  explicit RunLog(const std::string& dir);
  RunLog() = default;  // silent: lines go nowhere
  bool silent() const { return path_.empty(); }
  void line(const std::string& text);
  // Appends "error: <message>" to log.txt only (stderr already has the message); never throws,
  // since it reports a failure that may be the log's own.
  void record_error(const std::string& message) noexcept;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream file_;
};

}  // namespace kgpt::io
