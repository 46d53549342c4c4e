#pragma once
// Checkpoints: one HDF5 file per saved step, <run_dir>/checkpoints/ckpt_<step>.h5, holding every
// parameter tensor (/params/<name>, shaped, float32), the optimizer state of every tensor
// (/optim/<adam_m|adam_v|muon_momentum>/<name>), what the run's step features keep (features/:
// buffers of the parameters' layout in groups of their own, /average/<ema|swa>/<name> for the
// averages of the weights, and whole numbers beside the training state, /state/swa_count), the
// training state (/state: step, tokens seen, data stream position, training seconds, seed; training
// uses no other random numbers), the resolved deck and the run metadata (/metadata). A checksum over
// all of it is stored in the file and verified on load.
//
// Rank 0 writes a temporary file, fsyncs it and renames it into place, so a crash mid-write
// leaves the previous checkpoints intact; then keeps the newest keep_last plus every keep_every-th.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "io/history.hpp"
#include "model/parameters.hpp"
#include "optim/optimizer.hpp"

namespace kgpt::io {

struct CheckpointState {
  std::int64_t step = 0;              // optimizer steps done
  std::int64_t tokens_seen = 0;       // training tokens of those steps, all ranks
  std::uint64_t stream_position = 0;  // tokens the data stream has consumed
  double training_seconds = 0.0;      // for the wall-clock cap and schedule
  std::int64_t seed = 0;
};

// What step features (features/feature.hpp) keep in a checkpoint, by name: buffers of the parameter
// buffer's layout, each a group of shaped tensors (a path of two parts, "average/ema"), and whole
// numbers stored under /state beside the training state ("swa_count"). Both are stored and summed in
// the order of their names, so no feature's order matters.
struct FeatureState {
  std::map<std::string, std::vector<float>> groups;
  std::map<std::string, std::int64_t> scalars;
};

struct CheckpointPolicy {
  int keep_last = 3;   // newest checkpoints kept
  int keep_every = 0;  // also keep those whose step is a multiple of this (0: none)
};

std::string checkpoint_folder(const std::string& run_dir);
std::string checkpoint_path(const std::string& run_dir, std::int64_t step);

// Checkpoint files of a run directory, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

// The optimizer's state as a checkpoint holds it: by name, host copies with the parameter buffer's
// layout. Collective when the optimizer holds one shard of several (`shards`, parallel.zero_stage:
// 1): every rank sends its span and rank 0 alone gets the whole buffers (the others get none).
using HostState = std::vector<std::pair<std::string, std::vector<float>>>;
HostState checkpoint_state(const optim::Optimizer<float>& optimizer, const std::vector<optim::Shard>& shards,
                           std::size_t buffer_size);

// Writes the checkpoint of `state.step` and prunes older ones; returns its path. Rank 0 only.
std::string write_checkpoint(const std::string& run_dir, const model::Parameters<float>& params,
                             const HostState& optimizer_state, const CheckpointState& state,
                             const io::RunMetadata& metadata, const CheckpointPolicy& policy,
                             const FeatureState& features = {});
// The same for an optimizer of the whole buffer.
std::string write_checkpoint(const std::string& run_dir, const model::Parameters<float>& params,
                             const optim::Optimizer<float>& optimizer, const CheckpointState& state,
                             const io::RunMetadata& metadata, const CheckpointPolicy& policy);

// Reads `path` into params, optimizer (its shard of each state buffer) and, when given, the step
// features' state after checking the checksum and that every tensor's name, shape and type match
// this model. `features` names the groups wanted (its keys; each held one is filled, the others stay
// empty) and gets every feature scalar the file holds. Throws InputError naming the file and what
// differs.
CheckpointState load_checkpoint(const std::string& path, const model::Parameters<float>& params,
                                optim::Optimizer<float>& optimizer, FeatureState* features = nullptr);
// The same checks, reading only one set of weights (evaluation, sampling, export) into params: the
// live ones ("params") or a feature's group of them ("average/ema": InputError naming the file when
// it holds none). The optimizer state of `config`'s optimizer is read for the checksum and dropped,
// so no optimizer is allocated.
CheckpointState load_checkpoint_weights(const std::string& path, const model::Parameters<float>& params,
                                        const config::Config& config, const std::string& group = "params");
// What `path` holds of step features: its feature groups by name (their values left empty) and
// its feature scalars; `step` gets the checkpoint's step. No checksum is checked: load does.
FeatureState feature_contents(const std::string& path, std::int64_t& step);

// For --resume: "" when the checkpoint at `path` was written by a run of the model `deck` describes
// (every key the schema marks fixed_for_run has the value of the checkpoint's deck), else a message
// naming the checkpoint and, for each key that differs, both values and where this deck's came
// from. Throws Error when the file cannot be read (a damaged checkpoint, which --resume skips).
std::string model_change(const std::string& path, const config::ResolvedDeck& deck);

}  // namespace kgpt::io
