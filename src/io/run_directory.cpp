#include "io/run_directory.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/files.hpp"
#include "core/error.hpp"

namespace kgpt::io {

namespace fs = std::filesystem;

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

// The files of a run directory that the run, --resume and the tools read back.
const char* const kRunFiles[] = {"deck.yaml", "deck.source.yaml", "log.txt", "history.h5", "artifact.yaml",
                                 "checkpoints"};

// What `path` (absolute, its links resolved) is to the run directory that holds it, or "".
std::string run_role(const fs::path& path) {
  const fs::path folder = path.parent_path();
  const std::string name = path.filename().string();
  if (holds_run(folder.string())) {
    for (const char* file : kRunFiles) {
      if (name == file) return "the " + name + " of the run in " + folder.string();
    }
  }
  if (folder.filename() == "checkpoints" && holds_run(folder.parent_path().string())) {
    return "inside the checkpoints folder of the run in " + folder.parent_path().string() +
           " (where its checkpoints are written, listed and pruned)";
  }
  return "";
}

}  // namespace

std::string output_clash(const std::string& out, const std::string& input) {
  std::error_code error;
  if (fs::exists(out, error) && fs::equivalent(out, input, error)) return "is " + input + " itself";
  // The folder the file goes into, through its links, and the file's own name in it; and, where
  // `out` already exists, where its own link leads.
  const fs::path given = fs::absolute(out, error);
  std::string role = run_role(fs::weakly_canonical(given.parent_path(), error) / given.filename());
  if (role.empty()) role = run_role(fs::weakly_canonical(given, error));
  return role.empty() ? "" : "is " + role;
}

std::string run_directory_path(const config::ResolvedDeck& deck, const std::string& requested,
                               const std::string& suffix) {
  if (!suffix.empty()) {
    if (!requested.empty()) throw InputError("give --run-dir or --run-suffix, not both");
    if (suffix.find('/') != std::string::npos) {
      throw InputError("--run-suffix " + suffix + ": must not contain '/' (it extends the run's folder name)");
    }
  }
  if (!requested.empty()) return requested;
  const bool named = !deck.config.run.name.empty();
  const std::string name = (named ? deck.config.run.name : stem(deck.path)) + suffix;
  // run.name itself was checked with the deck; the deck file's name and the suffix are checked here.
  const std::string why = config::run_name_problem(name);
  if (!why.empty()) {
    throw InputError(named ? "--run-suffix " + suffix + ": the run name '" + name + "' " + why
                           : deck.path + ": the run name taken from the deck file's name, '" + name + "', " + why +
                                 "; set run.name");
  }
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
