// kgpt sweep: expand a sweep file into numbered decks and a manifest for a Slurm job array.

#include <sys/stat.h>

#include <dirent.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "commands.hpp"
#include "config/sweep.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "data/dataset_check.hpp"
#include "train/memory_plan.hpp"

namespace kgpt::app {

const CommandSpec& sweep_spec() {
  static const CommandSpec spec{
      "sweep",
      "SWEEP.yaml --out DIR [--world-size N] [--no-data]",
      "expand a sweep file into numbered decks for a job array",
      "Reads SWEEP.yaml (a base deck and a grid or list of overrides; format below), validates the\n"
      "deck of every point for --world-size ranks, its memory plan, and its data unless --no-data, exactly as\n"
      "`kgpt check` does. Only when every point is valid does it write DIR:\n"
      "  DIR/decks/000.yaml ...   one resolved deck per point; point i trains in DIR/runs/000 ...\n"
      "  DIR/manifest.csv         index,deck,run_dir and one column per swept key\n"
      "  DIR/manifest.json        the same with the sweep's name, base deck and common overrides\n"
      "  DIR/sweep.yaml           a copy of the sweep file\n"
      "DIR must not exist or be empty. Paths in the sweep file and the decks are relative to the\n"
      "folder kgpt runs in: submit the array from the same folder, with the line it prints:\n"
      "  sbatch --array=0-<N-1>%<K> slurm/sweep.sbatch DIR\n\n"
      "Sweep file:\n"
      "  base: inputs/tiny_cpu.yaml      # the base deck\n"
      "  name: lr_seed                   # optional (default: the sweep file's name)\n"
      "  set: {train.iterations: 100}    # optional: overrides for every point\n"
      "  grid:                           # every combination, the last key varying fastest\n"
      "    optim.matrix_lr: [0.02, 0.04]\n"
      "    run.seed: [1, 2]\n"
      "  list:                           # explicit points; with a grid, each entry is combined\n"
      "    - {model.n_layer: 2}          # with every grid combination\n"
      "Keys are deck keys (docs/deck-reference.md) except run.name and run.out_dir, which the sweep\n"
      "sets. Every mistake is reported with the sweep file's line:column, or the point it is in.",
      {
          {"out", "DIR", "folder to write the decks and manifests to (must not exist, or be empty)"},
          {"world-size", "N", "number of MPI ranks each point will run on (default 1)"},
          {"no-data", "", "skip the check of the data files"},
      },
      1,
      1};
  return spec;
}

namespace {

// False when `path` exists and is not an empty folder; `reason` says why.
bool usable_output_folder(const std::string& path, std::string& reason) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return true;
  if (!S_ISDIR(info.st_mode)) {
    reason = "exists and is not a folder";
    return false;
  }
  DIR* dir = ::opendir(path.c_str());
  if (!dir) {
    reason = "cannot be read";
    return false;
  }
  bool empty = true;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") empty = false;
  }
  ::closedir(dir);
  if (!empty) reason = "already exists and is not empty (a sweep never overwrites one)";
  return empty;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

int run_sweep(const ParsedArgs& args) {
  const std::string out = args.get("out");
  if (out.empty()) throw InputError("kgpt sweep needs --out DIR, the folder for the decks and manifests");
  std::string reason;
  if (!usable_output_folder(out, reason)) throw InputError("--out " + out + ": " + reason);
  const int world_size = static_cast<int>(int_option(args, "world-size", 1, 1, 1 << 20));
  const std::string sweep_path = args.positional().at(0);

  const config::Sweep sweep = config::expand_sweep(sweep_path, out, world_size);
  // Every point must fit its device, as `kgpt train` will require.
  std::vector<std::string> too_large;
  for (const auto& point : sweep.points) {
    try {
      train::require_fit(point.deck, train::plan_memory(point.deck, model::this_build()), model::this_build());
    } catch (const InputError& e) {
      too_large.push_back("point " + std::to_string(point.index) + ": " + e.what());
    }
  }
  if (!too_large.empty()) throw InputError(too_large);
  std::string data_note = "data not checked (--no-data)";
  if (!args.has("no-data")) {
    // Points that share their data keys share one check.
    std::map<std::string, std::string> checked;
    std::vector<std::string> problems;
    for (const auto& point : sweep.points) {
      const config::DataConfig& d = point.deck.config.data;
      const std::string key = d.train_files + "\n" + d.val_files + "\n" + config::name_of(d.tokenizer) + "\n" +
                              d.vocab_file + "\n" + config::name_of(d.tiktoken_encoding) + "\n" +
                              std::to_string(point.deck.config.model.vocab_size) + "\n" +
                              // the val split must hold seq_len + 1 tokens within train.val_tokens
                              std::to_string(point.deck.config.train.seq_len) + "\n" +
                              std::to_string(point.deck.config.train.val_tokens);
      if (!checked.count(key)) {
        try {
          data::check_dataset(point.deck);
          checked[key] = "";
        } catch (const InputError& e) {
          checked[key] = e.what();
        }
      }
      if (!checked[key].empty()) problems.push_back("point " + std::to_string(point.index) + ": " + checked[key]);
    }
    if (!problems.empty()) throw InputError(problems);
    data_note = "data checked";
  }

  make_directories(out + "/decks");
  for (const auto& point : sweep.points) {
    write_file_atomically(out + "/decks/" + config::point_name(sweep, point.index) + ".yaml",
                          config::render_point_deck(sweep, point));
  }
  write_file_atomically(out + "/sweep.yaml", read_file(sweep_path));
  write_file_atomically(out + "/manifest.csv", config::render_manifest_csv(sweep));
  // manifest.json last: its presence marks a complete sweep folder.
  write_file_atomically(out + "/manifest.json", config::render_manifest_json(sweep));

  const std::size_t n = sweep.points.size();
  std::cout << "sweep " << sweep.name << ": " << n << " point" << (n == 1 ? "" : "s") << " from "
            << sweep.base_deck << ", every deck valid for world size " << world_size << "; " << data_note << "\n";
  std::cout << "wrote " << out << "/decks/" << config::point_name(sweep, 0) << ".yaml .. "
            << config::point_name(sweep, static_cast<int>(n - 1)) << ".yaml, " << out << "/manifest.csv, " << out
            << "/manifest.json\n";
  std::cout << "submit: sbatch --array=0-" << n - 1 << "%" << std::min<std::size_t>(n, 8) << " slurm/sweep.sbatch "
            << out << "\n";
  return 0;
}

}  // namespace kgpt::app
