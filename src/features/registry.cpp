#include "features/registry.hpp"

#include "core/error.hpp"
#include "features/late_qat/late_qat.hpp"
#include "features/weight_averages/weight_averages.hpp"

namespace kgpt::features {

const std::vector<FeatureEntry>& registered_features() {
  static const std::vector<FeatureEntry> entries = {
      {"late_qat", {"train.qat_start_lr"}, make_late_qat, late_qat_memory, nullptr, nullptr},
      {"weight_averages", {"train.ema_decay", "train.swa_every", "train.swa_start_lr", "train.eval_weights"},
       make_weight_averages, weight_average_memory, weight_average_group, weight_average_problem},
  };
  return entries;
}

StepFeatures make_step_features(const config::Config& config, const model::ParameterLayout& layout) {
  StepFeatures features;
  for (const FeatureEntry& entry : registered_features()) {
    if (auto feature = entry.make(config, layout)) features.push_back(std::move(feature));
  }
  return features;
}

std::vector<MemoryRow> step_feature_memory(const config::Config& config, const model::ParameterLayout& layout) {
  std::vector<MemoryRow> rows;
  for (const FeatureEntry& entry : registered_features()) {
    for (MemoryRow& row : entry.memory(config, layout)) rows.push_back(std::move(row));
  }
  return rows;
}

io::FeatureState saved_state(const StepFeatures& features) {
  io::FeatureState state;
  for (const auto& feature : features) feature->save(state);
  return state;
}

io::FeatureState wanted_state(const StepFeatures& features) {
  io::FeatureState state;
  for (const auto& feature : features) {
    for (const std::string& group : feature->checkpoint_groups()) state.groups[group] = {};
  }
  return state;
}

void restore_state(const StepFeatures& features, const std::string& path, const io::FeatureState& state) {
  for (const auto& feature : features) feature->restore(path, state);
}

EvaluatedWeights::EvaluatedWeights(const StepFeatures& features, const ExecSpace& exec, config::Weights weights,
                                   const Vector<float>& values)
    : exec_(exec), weights_(weights), values_(values) {
  if (weights == config::Weights::live) return;
  for (const auto& feature : features) {
    if (feature->swap_weights(exec, weights, values)) {
      swapped_ = feature.get();
      return;
    }
  }
}

EvaluatedWeights::~EvaluatedWeights() {
  // Back: training goes on from the live weights.
  if (swapped_ != nullptr) swapped_->swap_weights(exec_, weights_, values_);
}

io::CheckpointState load_weights(const std::string& path, const model::Parameters<float>& params,
                                 const config::Config& config, config::Weights weights) {
  if (weights == config::Weights::live) return io::load_checkpoint_weights(path, params, config);
  for (const FeatureEntry& entry : registered_features()) {
    const std::string group = entry.weights_group != nullptr ? entry.weights_group(weights) : "";
    if (group.empty()) continue;
    std::int64_t step = 0;
    const io::FeatureState held = io::feature_contents(path, step);
    const std::string problem = entry.weights_problem(path, weights, held, step, config);
    if (!problem.empty()) throw InputError(problem);
    return io::load_checkpoint_weights(path, params, config, group);
  }
  throw InputError(path + ": no step feature keeps the weights '" + config::name_of(weights) + "'");
}

}  // namespace kgpt::features
