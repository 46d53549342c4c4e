#include "features/weight_averages/weight_averages.hpp"

#include <utility>

#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/kernel.hpp"
#include "core/text.hpp"

namespace kgpt::features {

namespace {

const char* const kSwaCount = "swa_count";

// Why a checkpoint cannot give `weights`, an average its run did not keep.
std::string not_kept(const std::string& path, config::Weights weights) {
  const bool ema = weights == config::Weights::ema;
  return path + ": the checkpoint keeps no " + (ema ? "EMA" : "SWA") + " of the weights (the run that wrote it had " +
         (ema ? "train.ema_decay 0" : "train.swa_every 0") + ")";
}

}  // namespace

std::string weight_average_group(config::Weights weights) {
  return weights == config::Weights::live ? "" : std::string("average/") + config::name_of(weights);
}

WeightAverages::WeightAverages(const config::TrainConfig& train, std::size_t buffer_size) : train_(train) {
  if (train.ema_decay > 0) {
    kept_.push_back(config::Weights::ema);
    ema_ = Vector<float>("kgpt::weights_ema", buffer_size);
  }
  if (train.swa_every > 0) {
    kept_.push_back(config::Weights::swa);
    swa_ = Vector<float>("kgpt::weights_swa", buffer_size);
  }
}

bool WeightAverages::available(config::Weights weights) const {
  switch (weights) {
    case config::Weights::live: return false;
    case config::Weights::ema: return ema_.extent(0) > 0;
    case config::Weights::swa: return swa_count_ > 0;
  }
  return false;
}

const Vector<float>& WeightAverages::buffer(config::Weights weights) const {
  if (weights == config::Weights::ema && ema_.extent(0) > 0) return ema_;
  if (weights == config::Weights::swa && swa_.extent(0) > 0) return swa_;
  throw Error(ExitCode::failure, std::string("weight averages: this run keeps no ") + config::name_of(weights));
}

void WeightAverages::start(const ExecSpace& exec, const Vector<float>& values) {
  if (ema_.extent(0) > 0) Kokkos::deep_copy(exec, ema_, values);
  swa_count_ = 0;
}

void WeightAverages::after_update(const ExecSpace& exec, int step, double lr_multiplier, const Vector<float>& values) {
  const int done = step + 1;  // SWA counts steps from 1
  if (ema_.extent(0) > 0) {
    const auto decay = static_cast<float>(train_.ema_decay);
    const float rest = 1.0f - decay;
    const Vector<float> ema = ema_;
    kgpt::parallel_for(
        "kgpt::weight_averages::ema", Kokkos::RangePolicy<ExecSpace>(exec, 0, ema.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i) { ema(i) = decay * ema(i) + rest * values(i); });
  }
  if (swa_.extent(0) > 0 && done % train_.swa_every == 0 && lr_multiplier < train_.swa_start_lr) {
    swa_count_ += 1;
    const Vector<float> swa = swa_;
    if (swa_count_ == 1) {
      Kokkos::deep_copy(exec, swa, values);
    } else {
      const auto count = static_cast<float>(swa_count_);
      kgpt::parallel_for(
          "kgpt::weight_averages::swa", Kokkos::RangePolicy<ExecSpace>(exec, 0, swa.extent(0)),
          KOKKOS_LAMBDA(const std::size_t i) { swa(i) += (values(i) - swa(i)) / count; });
    }
  }
}

bool WeightAverages::swap_weights(const ExecSpace& exec, config::Weights weights, const Vector<float>& values) {
  if (!available(weights)) return false;
  const Vector<float> average = buffer(weights);
  kgpt::parallel_for(
      "kgpt::weight_averages::swap", Kokkos::RangePolicy<ExecSpace>(exec, 0, average.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) {
        const float kept = values(i);
        values(i) = average(i);
        average(i) = kept;
      });
  return true;
}

std::vector<std::string> WeightAverages::checkpoint_groups() const {
  std::vector<std::string> names;
  for (const config::Weights w : kept_) names.push_back(weight_average_group(w));
  return names;
}

void WeightAverages::save(io::FeatureState& state) const {
  for (const config::Weights w : kept_) state.groups[weight_average_group(w)] = kgpt::to_host(buffer(w));
  if (swa_.extent(0) > 0) state.scalars[kSwaCount] = swa_count_;
}

void WeightAverages::restore(const std::string& path, const io::FeatureState& state) {
  for (const config::Weights w : kept_) {
    const auto found = state.groups.find(weight_average_group(w));
    if (found == state.groups.end() || found->second.empty()) throw InputError(not_kept(path, w));
    kgpt::from_host(found->second, buffer(w));
  }
  if (swa_.extent(0) > 0) {
    const auto count = state.scalars.find(kSwaCount);
    swa_count_ = count == state.scalars.end() ? 0 : count->second;
  }
}

std::unique_ptr<StepFeature> make_weight_averages(const config::Config& config, const model::ParameterLayout& layout) {
  if (config.train.ema_decay <= 0 && config.train.swa_every <= 0) return nullptr;
  return std::make_unique<WeightAverages>(config.train, layout.buffer_size());
}

std::vector<MemoryRow> weight_average_memory(const config::Config& config, const model::ParameterLayout& layout) {
  const config::TrainConfig& train = config.train;
  const std::size_t buffers = (train.ema_decay > 0 ? 1 : 0) + (train.swa_every > 0 ? 1 : 0);
  if (buffers == 0) return {};
  const bool both = buffers == 2;
  const std::string n = text::with_thousands(static_cast<unsigned long long>(layout.buffer_size()));
  return {{"weight averages", static_cast<double>(buffers * layout.buffer_size() * sizeof(float)),
           std::string(both ? "EMA and SWA, " : train.ema_decay > 0 ? "EMA, " : "SWA, ") + n + " fp32 values" +
               (both ? " each" : "")}};
}

std::string weight_average_problem(const std::string& path, config::Weights weights, const io::FeatureState& held,
                                   std::int64_t step, const config::Config& config) {
  if (held.groups.count(weight_average_group(weights)) == 0) return not_kept(path, weights);
  const auto count = held.scalars.find(kSwaCount);
  if (weights == config::Weights::swa && (count == held.scalars.end() || count->second == 0)) {
    return path + ": its SWA of the weights holds no snapshot yet (swa_count 0 at step " + std::to_string(step) +
           "; the first is taken after a step that is a multiple of train.swa_every = " +
           std::to_string(config.train.swa_every) +
           " once the learning-rate multiplier is below train.swa_start_lr = " +
           text::format_double(config.train.swa_start_lr) + "): use the live or EMA weights, or a later checkpoint";
  }
  return "";
}

}  // namespace kgpt::features
