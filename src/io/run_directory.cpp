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

bool holds_run(const std::string& path) { return exists(path + "/deck.yaml"); }

void require_same_run(const std::string& path, const config::ResolvedDeck& deck) {
  config::DeckOptions options;
  options.world_size = deck.options.world_size;
  config::ResolvedDeck stored;
  try {
    stored = config::load_deck(path + "/deck.yaml", options);
  } catch (const InputError& e) {
    throw InputError(path + "/deck.yaml: the run directory's deck does not read back: " + e.what());
  }
  std::vector<std::string> keys = config::differing_keys(stored.config, deck.config);
  if (keys.empty()) return;
  std::string names;
  for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key;
  throw InputError(path + ": holds a run made from other deck values (" + names + " differ from " + deck.path +
                   "); choose another --run-dir, or move that run away");
}

void write_resolved_deck(const std::string& dir, const config::ResolvedDeck& deck) {
  write_file_atomically(dir + "/deck.source.yaml", deck.text);
  write_file_atomically(dir + "/deck.yaml", config::render_resolved(deck));
}

}  // namespace kgpt::io
