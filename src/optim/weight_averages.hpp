#pragma once
// Averages of the weights beside the weights themselves (parameter-golf's records evaluate and
// export them): buffers of the parameter buffer's layout, on the device, updated after each
// optimizer step and kept in checkpoints.
//   ema (train.ema_decay d > 0): starts as the initial weights; after every step,
//        ema = d ema + (1 - d) w, in the parameters' precision.
//   swa (train.swa_every N > 0): after every step s (counted from 1) that is a multiple of N and
//        whose learning-rate multiplier is below train.swa_start_lr, the weights join a uniform
//        average: the first snapshot is copied, the k-th gives swa += (w - swa) / k.
// An average is evaluated by swapping it with the weights (exact both ways, so no third buffer),
// running the forward, and swapping back.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"

namespace kgpt::optim {

// The checkpoint group of an average ("ema", "swa").
const char* average_name(config::Weights weights);

class WeightAverages {
 public:
  // Allocates the averages `train` asks for over a buffer of `buffer_size` values.
  WeightAverages(const config::TrainConfig& train, std::size_t buffer_size);

  // The averages kept, in the order checkpoints store them.
  const std::vector<config::Weights>& kept() const { return kept_; }
  // Whether `weights` can be evaluated: live always; ema when kept; swa once it has a snapshot.
  bool available(config::Weights weights) const;
  std::int64_t swa_count() const { return swa_count_; }

  // A new run: the EMA starts from `values`.
  void start(const ExecSpace& exec, const ConstVector<float>& values);
  // After optimizer step `step` (counted from 1), taken at the schedule's `lr_multiplier`.
  void update(const ExecSpace& exec, int step, double lr_multiplier, const ConstVector<float>& values);
  // Exchanges `values` with the average (an available one other than live); a second call undoes it.
  void swap(const ExecSpace& exec, config::Weights weights, const Vector<float>& values);

  // Checkpoints: an average's host copy and back; the SWA's snapshot count.
  std::vector<float> to_host(config::Weights weights) const;
  void from_host(config::Weights weights, const std::vector<float>& host, std::int64_t swa_count);

 private:
  const Vector<float>& buffer(config::Weights weights) const;
  config::TrainConfig train_;
  std::vector<config::Weights> kept_;
  Vector<float> ema_, swa_;
  std::int64_t swa_count_ = 0;
};

// Bytes of device memory the averages of `train` take for a buffer of `buffer_size` values.
std::size_t weight_average_bytes(const config::TrainConfig& train, std::size_t buffer_size);

}  // namespace kgpt::optim
