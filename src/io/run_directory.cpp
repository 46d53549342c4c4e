#include "io/run_directory.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/files.hpp"
#include "core/error.hpp"

namespace kgpt::io {

namespace {

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

std::string stem(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name.empty() ? "run" : name;
}

}  // namespace

std::string run_directory_path(const config::ResolvedDeck& deck, const std::string& requested) {
  if (!requested.empty()) return requested;
  const std::string name = deck.config.run.name.empty() ? stem(deck.path) : deck.config.run.name;
  return deck.config.run.out_dir.empty() ? name : deck.config.run.out_dir + "/" + name;
}

void create_run_directory(const std::string& path) {
  if (exists(path + "/deck.yaml")) {
    throw InputError(path + ": run directory already holds a run (deck.yaml is there); choose another "
                     "--run-dir or run.name, or move the old run away");
  }
  make_directories(path);
}

void require_run_directory(const std::string& path) {
  if (!exists(path + "/deck.yaml")) {
    throw InputError(path + ": no run to resume here (no deck.yaml); give the run directory of the run with "
                     "--run-dir, or drop --resume to start a new run");
  }
}

void write_resolved_deck(const std::string& dir, const config::ResolvedDeck& deck) {
  write_file_atomically(dir + "/deck.source.yaml", deck.text);
  write_file_atomically(dir + "/deck.yaml", config::render_resolved(deck));
}

}  // namespace kgpt::io
