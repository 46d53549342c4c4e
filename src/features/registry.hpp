#pragma once
// The step features kgpt has: one line each in registry.cpp (features/feature.hpp). Everything that
// builds, runs, checkpoints or plans the features goes through here.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "features/feature.hpp"
#include "io/checkpoint.hpp"
#include "model/parameters.hpp"

namespace kgpt::features {

struct FeatureEntry {
  const char* folder;             // features/<folder>/
  std::vector<const char*> keys;  // the deck keys it reads
  // The feature `config` asks for over `layout`, or null when the deck leaves it off.
  std::unique_ptr<StepFeature> (*make)(const config::Config& config, const model::ParameterLayout& layout);
  // Its rows of the memory plan, none when off.
  std::vector<MemoryRow> (*memory)(const config::Config& config, const model::ParameterLayout& layout);
  // --weights: the checkpoint group that holds `weights` when this feature keeps such weights, else
  // ""; and why a checkpoint (its step and what it holds of features) cannot stand for them ("" when
  // it can). Both null for a feature that keeps no weights.
  std::string (*weights_group)(config::Weights weights);
  std::string (*weights_problem)(const std::string& path, config::Weights weights, const io::FeatureState& held,
                                 std::int64_t step, const config::Config& config);
};

// In the order the step runs them.
const std::vector<FeatureEntry>& registered_features();

using StepFeatures = std::vector<std::unique_ptr<StepFeature>>;
// The features `config` asks for, allocated over `layout`.
StepFeatures make_step_features(const config::Config& config, const model::ParameterLayout& layout);
// Their memory-plan rows, without allocating.
std::vector<MemoryRow> step_feature_memory(const config::Config& config, const model::ParameterLayout& layout);

// Checkpoints: the features' state to write; the groups a resume wants (empty values to fill); the
// state read back into the features.
io::FeatureState saved_state(const StepFeatures& features);
io::FeatureState wanted_state(const StepFeatures& features);
void restore_state(const StepFeatures& features, const std::string& path, const io::FeatureState& state);

// An evaluation of `weights`: while it lives, they stand in `values` in place of the live weights,
// swapped in by the feature that keeps them and back out when it ends; where none does, or they
// stand for no model yet (the SWA before its first snapshot), the live weights stay.
class EvaluatedWeights {
 public:
  EvaluatedWeights(const StepFeatures& features, const ExecSpace& exec, config::Weights weights,
                   const Vector<float>& values);
  ~EvaluatedWeights();
  EvaluatedWeights(const EvaluatedWeights&) = delete;
  EvaluatedWeights& operator=(const EvaluatedWeights&) = delete;
  // The weights in `values` now.
  config::Weights weights() const { return swapped_ != nullptr ? weights_ : config::Weights::live; }

 private:
  ExecSpace exec_;
  config::Weights weights_;
  Vector<float> values_;
  StepFeature* swapped_ = nullptr;
};

// `kgpt eval/sample/export --weights`: loads the weights `weights` names from the checkpoint at
// `path` (the live ones, or the feature's group that keeps them) into params, after the checks of
// io::load_checkpoint_weights and the feature's own (InputError naming the file).
io::CheckpointState load_weights(const std::string& path, const model::Parameters<float>& params,
                                 const config::Config& config, config::Weights weights);

}  // namespace kgpt::features
