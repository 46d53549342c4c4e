#include "train/late_qat.hpp"

#include <cmath>

#include "core/kernel.hpp"
#include "io/artifact.hpp"
#include "quant/rows.hpp"

namespace kgpt::train {

namespace {

// Whether late QAT rounds this tensor: the attention's and the MLP's matrices.
bool quantized(const model::TensorSpec& spec) { return spec.shape.size() == 2 && model::is_block_matrix(spec.role); }

}  // namespace

LateQat::LateQat(const config::Config& config, const model::ParameterLayout& layout) : train_(config.train) {
  if (config.train.qat_start_lr <= 0) return;
  for (const auto& entry : layout.entries()) {
    if (!quantized(entry.spec)) continue;
    const int bits = io::export_bits(io::weight_group(entry.spec), config.export_);
    targets_.push_back({entry.offset, entry.spec.shape[0], entry.spec.shape[1], quant::code_limit(bits)});
  }
  if (!targets_.empty()) live_ = Vector<float>("kgpt::late_qat::live_weights", layout.buffer_size());
}

bool LateQat::active(int step, double lr_multiplier) const {
  return enabled() && step >= train_.warmup_steps && lr_multiplier < train_.qat_start_lr;
}

void LateQat::quantize(const ExecSpace& exec, const Vector<float>& values) {
  Kokkos::deep_copy(exec, live_, values);
  float* const data = values.data();
  for (const Target& t : targets_) {
    const std::size_t offset = t.offset, columns = t.columns;
    const auto limit = static_cast<float>(t.limit);
    // A team per row, its threads over the columns (on a GPU coalesced: a thread per row read
    // each row on its own). The row's maximum is exact in any order, so every backend agrees.
    kgpt::parallel_for(
        "kgpt::late_qat::fake_quantize", Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(t.rows), Kokkos::AUTO),
        KOKKOS_LAMBDA(const Kokkos::TeamPolicy<ExecSpace>::member_type& team) {
          float* const row = data + offset + static_cast<std::size_t>(team.league_rank()) * columns;
          float top = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, columns),
              [&](const std::size_t c, float& m) { m = fmaxf(m, fabsf(row[c])); }, Kokkos::Max<float>(top));
          const float scale = quant::max_scale(top, limit);
          if (!(scale > 0.0f)) return;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, columns), [&](const std::size_t c) {
            row[c] = quant::row_code(row[c], scale, limit) * scale;
          });
        });
  }
}

void LateQat::restore(const ExecSpace& exec, const Vector<float>& values) { Kokkos::deep_copy(exec, values, live_); }

std::size_t late_qat_bytes(const config::Config& config, const model::ParameterLayout& layout) {
  if (config.train.qat_start_lr <= 0) return 0;
  for (const auto& entry : layout.entries()) {
    if (quantized(entry.spec)) return layout.buffer_size() * sizeof(float);
  }
  return 0;
}

}  // namespace kgpt::train
