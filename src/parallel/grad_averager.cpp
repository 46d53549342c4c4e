#include "parallel/grad_averager.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <type_traits>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "parallel/mpi_averager.hpp"
#if KGPT_BACKEND_CUDA && defined(KGPT_HAVE_NCCL)
#include "parallel/nccl_averager.hpp"
#endif

namespace kgpt::parallel {

namespace {

// Adds the seconds of its lifetime to `total`.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

template <class T>
GradientAverager<T>::GradientAverager(const Vector<T>& grads, int world_size, AveragingSettings settings)
    : grads_(grads), world_size_(world_size), settings_(settings) {
  if (settings_.bucket_elements == 0) settings_.bucket_elements = 1;
}

template <class T>
void GradientAverager<T>::begin_step() {
  counters_ = AveragingCounters{};
  last_micro_step_ = false;
  pending_ = {0, 0};
  sent_.clear();
}

template <class T>
void GradientAverager<T>::begin_micro_step(bool last) {
  last_micro_step_ = last;
}

template <class T>
void GradientAverager<T>::ready(const ExecSpace& exec, std::size_t begin, std::size_t end) {
  if (!settings_.overlap || !last_micro_step_ || begin >= end) return;
  auto& [pb, pe] = pending_;
  if (pb == pe) {
    pending_ = {begin, end};
  } else if (end == pb) {
    pb = begin;
  } else if (begin == pe) {
    pe = end;
  } else {
    send(exec, pb, pe);
    pending_ = {begin, end};
  }
  if (pe - pb >= settings_.bucket_elements) {
    send(exec, pb, pe);
    pending_ = {0, 0};
  }
  ScopedTimer timer(counters_.seconds);
  progress();
}

template <class T>
void GradientAverager<T>::finish(const ExecSpace& exec) {
  const std::size_t size = grads_.extent(0);
  if (!settings_.overlap) {
    send(exec, 0, size);
  } else {
    if (pending_.first != pending_.second) send(exec, pending_.first, pending_.second);
    pending_ = {0, 0};
    // Every range nobody reported is final now.
    auto sent = sent_;
    std::sort(sent.begin(), sent.end());
    std::size_t at = 0;
    for (const auto& [b, e] : sent) {
      if (b > at) send(exec, at, b);
      at = std::max(at, e);
    }
    if (at < size) send(exec, at, size);
  }
  ScopedTimer timer(counters_.seconds);
  wait(exec);
}

template <class T>
void GradientAverager<T>::send(const ExecSpace& exec, std::size_t begin, std::size_t end) {
  if (!last_micro_step_) ++counters_.calls_before_last_micro_step;
  ++counters_.calls;
  counters_.bytes += static_cast<long long>((end - begin) * sizeof(T));
  sent_.emplace_back(begin, end);
  ScopedTimer timer(counters_.seconds);
  start(exec, grads_.data() + begin, end - begin);
}

template class GradientAverager<float>;
template class GradientAverager<double>;

namespace {

// A world of one rank: the gradients are already the average; nothing is sent or counted.
template <class T>
class SingleRankAverager final : public GradientAverager<T> {
 public:
  SingleRankAverager(const Vector<T>& grads, AveragingSettings settings) : GradientAverager<T>(grads, 1, settings) {}
  double backward_scale_factor() const override { return 1.0; }
  const char* transport() const override { return "none"; }
  void ready(const ExecSpace&, std::size_t, std::size_t) override {}
  void finish(const ExecSpace&) override {}

 protected:
  void start(const ExecSpace&, T*, std::size_t) override {}
  void wait(const ExecSpace&) override {}
};

}  // namespace

template <class T>
std::unique_ptr<GradientAverager<T>> make_gradient_averager(const ExecSpace& exec, const Vector<T>& grads,
                                                            int world_size, AveragingSettings settings) {
  if (world_size == 1) return std::make_unique<SingleRankAverager<T>>(grads, settings);
#if KGPT_BACKEND_CUDA && defined(KGPT_HAVE_NCCL)
  return make_nccl_averager<T>(grads, world_size, settings, exec.cuda_stream());
#else
  (void)exec;
  return make_mpi_averager<T>(grads, world_size, settings);
#endif
}

template std::unique_ptr<GradientAverager<float>> make_gradient_averager(const ExecSpace&, const Vector<float>&, int,
                                                                         AveragingSettings);
template std::unique_ptr<GradientAverager<double>> make_gradient_averager(const ExecSpace&, const Vector<double>&,
                                                                          int, AveragingSettings);

}  // namespace kgpt::parallel
