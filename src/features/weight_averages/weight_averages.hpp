#pragma once
// Averages of the weights beside the weights themselves (parameter-golf's records evaluate and
// export them): buffers of the parameter buffer's layout, on the device, updated after each
// optimizer step and kept in checkpoints (/average/ema, /average/swa and /state/swa_count).
//   ema (train.ema_decay d > 0): starts as the initial weights; after every step,
//        ema = d ema + (1 - d) w, in the parameters' precision.
//   swa (train.swa_every N > 0): after every step s (counted from 1) that is a multiple of N and
//        whose learning-rate multiplier is below train.swa_start_lr, the weights join a uniform
//        average: the first snapshot is copied, the k-th gives swa += (w - swa) / k.
// An average is evaluated by swapping it with the weights (exact both ways, so no third buffer),
// running the forward, and swapping back.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "features/feature.hpp"
#include "model/parameters.hpp"

namespace kgpt::features {

class WeightAverages final : public StepFeature {
 public:
  // Allocates the averages `train` asks for over a buffer of `buffer_size` values.
  WeightAverages(const config::TrainConfig& train, std::size_t buffer_size);

  const char* name() const override { return "weight averages"; }
  // A new run: the EMA starts from `values`.
  void start(const ExecSpace& exec, const Vector<float>& values) override;
  void after_update(const ExecSpace& exec, int step, double lr_multiplier, const Vector<float>& values) override;
  bool swap_weights(const ExecSpace& exec, config::Weights weights, const Vector<float>& values) override;
  std::vector<std::string> checkpoint_groups() const override;
  void save(io::FeatureState& state) const override;
  void restore(const std::string& path, const io::FeatureState& state) override;

 private:
  // Whether `weights` stand for a model: ema when kept; swa once it has a snapshot.
  bool available(config::Weights weights) const;
  const Vector<float>& buffer(config::Weights weights) const;
  config::TrainConfig train_;
  std::vector<config::Weights> kept_;  // in the order checkpoints store them
  Vector<float> ema_, swa_;
  std::int64_t swa_count_ = 0;
};

// The registry's entry points (features/registry.cpp).
std::unique_ptr<StepFeature> make_weight_averages(const config::Config& config, const model::ParameterLayout& layout);
std::vector<MemoryRow> weight_average_memory(const config::Config& config, const model::ParameterLayout& layout);
// --weights ema|swa: the checkpoint group of the average ("" for the live weights).
std::string weight_average_group(config::Weights weights);
// Why the checkpoint at `path`, of step `step`, whose feature groups and scalars are `held`, cannot
// stand for `weights` ("" when it can): it keeps no such average, or its SWA has no snapshot yet
// (the buffer is zero until the first, so it stands for no model).
std::string weight_average_problem(const std::string& path, config::Weights weights, const io::FeatureState& held,
                                   std::int64_t step, const config::Config& config);

}  // namespace kgpt::features
