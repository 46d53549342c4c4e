#include "optim/weight_averages.hpp"

#include <utility>

#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/kernel.hpp"

namespace kgpt::optim {

const char* average_name(config::Weights weights) { return config::name_of(weights); }

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
    case config::Weights::live: return true;
    case config::Weights::ema: return ema_.extent(0) > 0;
    case config::Weights::swa: return swa_count_ > 0;
  }
  return false;
}

const Vector<float>& WeightAverages::buffer(config::Weights weights) const {
  if (weights == config::Weights::ema && ema_.extent(0) > 0) return ema_;
  if (weights == config::Weights::swa && swa_.extent(0) > 0) return swa_;
  throw Error(ExitCode::failure, std::string("weight averages: this run keeps no ") + average_name(weights));
}

void WeightAverages::start(const ExecSpace& exec, const ConstVector<float>& values) {
  if (ema_.extent(0) > 0) Kokkos::deep_copy(exec, ema_, values);
  swa_count_ = 0;
}

void WeightAverages::update(const ExecSpace& exec, int step, double lr_multiplier, const ConstVector<float>& values) {
  if (ema_.extent(0) > 0) {
    const auto decay = static_cast<float>(train_.ema_decay);
    const float rest = 1.0f - decay;
    const Vector<float> ema = ema_;
    kgpt::parallel_for(
        "kgpt::weight_averages::ema", Kokkos::RangePolicy<ExecSpace>(exec, 0, ema.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i) { ema(i) = decay * ema(i) + rest * values(i); });
  }
  if (swa_.extent(0) > 0 && step % train_.swa_every == 0 && lr_multiplier < train_.swa_start_lr) {
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

void WeightAverages::swap(const ExecSpace& exec, config::Weights weights, const Vector<float>& values) {
  if (!available(weights) || weights == config::Weights::live) {
    throw Error(ExitCode::failure, std::string("weight averages: ") + average_name(weights) + " cannot be swapped in");
  }
  const Vector<float> average = buffer(weights);
  kgpt::parallel_for(
      "kgpt::weight_averages::swap", Kokkos::RangePolicy<ExecSpace>(exec, 0, average.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) {
        const float kept = values(i);
        values(i) = average(i);
        average(i) = kept;
      });
}

std::vector<float> WeightAverages::to_host(config::Weights weights) const { return kgpt::to_host(buffer(weights)); }

void WeightAverages::from_host(config::Weights weights, const std::vector<float>& host, std::int64_t swa_count) {
  kgpt::from_host(host, buffer(weights));
  if (weights == config::Weights::swa) swa_count_ = swa_count;
}

std::size_t weight_average_bytes(const config::TrainConfig& train, std::size_t buffer_size) {
  const std::size_t buffers = (train.ema_decay > 0 ? 1 : 0) + (train.swa_every > 0 ? 1 : 0);
  return buffers * buffer_size * sizeof(float);
}

}  // namespace kgpt::optim
