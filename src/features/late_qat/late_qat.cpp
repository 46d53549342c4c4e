#include "features/late_qat/late_qat.hpp"

#include <cmath>

#include "core/kernel.hpp"
#include "core/text.hpp"
#include "io/artifact.hpp"
#include "quant/rows.hpp"

namespace kgpt::features {

namespace {

// Whether late QAT rounds this tensor: the attention's and the MLP's matrices.
bool quantized(const model::TensorSpec& spec) { return spec.shape.size() == 2 && model::is_block_matrix(spec.role); }

}  // namespace

LateQat::LateQat(const config::Config& config, const model::ParameterLayout& layout)
    : train_(config.train), attention_bits_(config.export_.attention_bits), mlp_bits_(config.export_.mlp_bits) {
  for (const auto& entry : layout.entries()) {
    if (!quantized(entry.spec)) continue;
    const int bits = io::export_bits(io::weight_group(entry.spec), config.export_);
    targets_.push_back({entry.offset, entry.spec.shape[0], entry.spec.shape[1], quant::code_limit(bits)});
  }
  live_ = Vector<float>("kgpt::late_qat::live_weights", layout.buffer_size());
}

std::string LateQat::before_micro_steps(const ExecSpace& exec, int step, double lr_multiplier,
                                        const Vector<float>& values) {
  const bool was = quantized_;
  quantized_ = step >= train_.warmup_steps && lr_multiplier < train_.qat_start_lr;
  if (!quantized_) return "";
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
  if (was) return "";
  return "late_qat: from step:" + std::to_string(step + 1) + " lr_multiplier:" + text::significant(lr_multiplier) +
         " (train.qat_start_lr " + text::significant(train_.qat_start_lr) + "), matrices at export.attention_bits " +
         std::to_string(attention_bits_) + " and mlp_bits " + std::to_string(mlp_bits_);
}

void LateQat::before_update(const ExecSpace& exec, const Vector<float>& values) {
  if (quantized_) Kokkos::deep_copy(exec, values, live_);
}

namespace {

bool has_targets(const config::Config& config, const model::ParameterLayout& layout) {
  if (config.train.qat_start_lr <= 0) return false;
  for (const auto& entry : layout.entries()) {
    if (quantized(entry.spec)) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<StepFeature> make_late_qat(const config::Config& config, const model::ParameterLayout& layout) {
  if (!has_targets(config, layout)) return nullptr;
  return std::make_unique<LateQat>(config, layout);
}

std::vector<MemoryRow> late_qat_memory(const config::Config& config, const model::ParameterLayout& layout) {
  if (!has_targets(config, layout)) return {};
  const std::string n = text::with_thousands(static_cast<unsigned long long>(layout.buffer_size()));
  return {{"late QAT copy", static_cast<double>(layout.buffer_size() * sizeof(float)),
           "the live weights while the micro-steps read rounded ones, " + n + " fp32 values"}};
}

}  // namespace kgpt::features
