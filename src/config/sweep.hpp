#pragma once
// Sweeps: one base deck and a grid or list of overrides, expanded into numbered decks that Slurm
// job arrays run one per task. The sweep file (YAML):
//
//   base: inputs/tiny_cpu.yaml        # the base deck (relative to the folder kgpt runs in)
//   name: lr_seed                     # optional; default: the sweep file's name
//   set:                              # optional: overrides for every point
//     train.iterations: 100
//   grid:                             # optional: every combination, the last key varying fastest
//     optim.matrix_lr: [0.02, 0.04]
//     run.seed: [1, 2]
//   list:                             # optional: explicit points; with a grid, each list entry
//     - {model.n_layer: 2}            # is combined with every grid combination
//     - {model.n_layer: 4, model.d_model: 192}

#include <string>
#include <vector>

#include "config/deck.hpp"

namespace kgpt::config {

struct SweepOverride {
  std::string key;    // "optim.matrix_lr"
  std::string value;  // the YAML scalar as written: "0.02"
  Origin origin;      // the sweep file's line:column of the value
};

struct SweepPoint {
  int index = 0;
  std::vector<SweepOverride> overrides;  // the point's own values (grid and list), in key order
  ResolvedDeck deck;                     // base deck + set + the point's values + run directory
};

struct Sweep {
  std::string path;  // the sweep file
  std::string name;
  std::string base_deck;
  std::vector<SweepOverride> common;  // `set:`
  std::vector<std::string> keys;      // every key that varies, in the order of first appearance
  std::vector<SweepPoint> points;
  int world_size = 1;
  int index_width = 3;  // digits of the numbered decks and run directories
};

// Reads the sweep file, expands it and validates every point's deck for `world_size` ranks with its
// run directory <out_dir>/runs/<index>. Throws InputError listing every problem (each naming the
// sweep file's line:column, or the point and its values) before anything is written.
Sweep expand_sweep(const std::string& sweep_path, const std::string& out_dir, int world_size);

// "000", "001", ...: the name of point `index`'s deck (decks/<name>.yaml) and run (runs/<name>).
std::string point_name(const Sweep& sweep, int index);

// The deck file of one point: the resolved deck, headed by the sweep and the point's values.
std::string render_point_deck(const Sweep& sweep, const SweepPoint& point);

// manifest.csv: index,deck,run_dir,<one column per varying key>; paths relative to the sweep folder.
std::string render_manifest_csv(const Sweep& sweep);
// manifest.json: the sweep, its base deck, world size, keys and every point with its overrides.
std::string render_manifest_json(const Sweep& sweep);

}  // namespace kgpt::config
