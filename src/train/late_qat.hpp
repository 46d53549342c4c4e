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
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "model/parameters.hpp"

namespace kgpt::train {

class LateQat {
 public:
  LateQat(const config::Config& config, const model::ParameterLayout& layout);

  bool enabled() const { return !targets_.empty(); }
  // Whether step `step` (counted from 0), at the schedule's multiplier, trains on quantized weights.
  bool active(int step, double lr_multiplier) const;

  // Keeps `values` aside and writes the fake-quantized matrices into them; restore() puts the kept
  // values back.
  void quantize(const ExecSpace& exec, const Vector<float>& values);
  void restore(const ExecSpace& exec, const Vector<float>& values);

 private:
  struct Target {
    std::size_t offset = 0, rows = 0, columns = 0;
    int limit = 0;
  };
  config::TrainConfig train_;
  std::vector<Target> targets_;
  Vector<float> live_;
};

// Bytes of device memory late QAT takes for this deck's layout (the live weights' copy), 0 when off.
std::size_t late_qat_bytes(const config::Config& config, const model::ParameterLayout& layout);

}  // namespace kgpt::train
