#pragma once
// Late quantization-aware training (train.qat_start_lr), as parameter-golf's records run it: from
// the first step after warmup whose learning-rate multiplier is below train.qat_start_lr, the
// micro-steps' forward and backward read the blocks' matrices (the attention's and the MLP's)
// fake-quantized at their export bits b (export.attention_bits, export.mlp_bits): per row, with
// R = 2^(b-1) - 1 and s = max|w| / R in float, w becomes clamp(rint(w / s), -R, R) s (a row of zeros
// stays zero). The optimizer then updates the live weights, kept aside meanwhile, with the gradients
// taken at the quantized ones: the straight-through estimator. The rounding is the export's
// (quant/rows.hpp) at its largest clip candidate, without the fp16 scale; the matrices are those
// whose role (model::Role) is attention or mlp. Nothing is kept between steps, so a resumed run
// quantizes as the uninterrupted one.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "features/feature.hpp"
#include "model/parameters.hpp"

namespace kgpt::features {

class LateQat final : public StepFeature {
 public:
  LateQat(const config::Config& config, const model::ParameterLayout& layout);

  const char* name() const override { return "late QAT"; }
  // From the step it acts at on: keeps `values` aside and writes the fake-quantized matrices into
  // them; says so once, when it starts.
  std::string before_micro_steps(const ExecSpace& exec, int step, double lr_multiplier,
                                 const Vector<float>& values) override;
  // Puts the kept values back, so that the optimizer updates the live weights.
  void before_update(const ExecSpace& exec, const Vector<float>& values) override;

 private:
  struct Target {
    std::size_t offset = 0, rows = 0, columns = 0;
    int limit = 0;
  };
  config::TrainConfig train_;
  int attention_bits_ = 0, mlp_bits_ = 0;
  std::vector<Target> targets_;
  Vector<float> live_;
  bool quantized_ = false;  // this step's micro-steps read the rounded matrices
};

// The registry's entry points (features/registry.cpp): null, and no rows, when the deck leaves late
// QAT off or the model has no block matrices.
std::unique_ptr<StepFeature> make_late_qat(const config::Config& config, const model::ParameterLayout& layout);
std::vector<MemoryRow> late_qat_memory(const config::Config& config, const model::ParameterLayout& layout);

}  // namespace kgpt::features
