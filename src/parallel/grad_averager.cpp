#include "parallel/grad_averager.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
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
    : grads_(grads), world_size_(world_size), settings_(std::move(settings)) {
  if (settings_.bucket_elements == 0) settings_.bucket_elements = 1;
  if (!settings_.owners.empty()) {
    // The spans must tile the buffer in rank order, or some gradient would have no owner.
    std::size_t at = 0;
    for (const OwnedSpan& span : settings_.owners) {
      if (span.begin != at || span.end < span.begin) throw Error(ExitCode::failure, "gradient averaging: owned spans do not tile the buffer");
      at = span.end;
    }
    if (settings_.owners.size() != static_cast<std::size_t>(world_size)) {
      throw Error(ExitCode::failure, "gradient averaging: " + std::to_string(settings_.owners.size()) +
                                         " owned spans for " + std::to_string(world_size) + " ranks");
    }
    if (at != grads_.extent(0)) {
      throw Error(ExitCode::failure, "gradient averaging: the owned spans end at " + std::to_string(at) +
                                         ", the buffer at " + std::to_string(grads_.extent(0)));
    }
  }
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
  sent_.emplace_back(begin, end);
  if (settings_.owners.empty()) {
    start_counted(exec, begin, end, -1);
    return;
  }
  // Each owner's piece of the bucket goes to its owner.
  for (std::size_t r = 0; r < settings_.owners.size(); ++r) {
    const std::size_t b = std::max(begin, settings_.owners[r].begin), e = std::min(end, settings_.owners[r].end);
    if (b < e) start_counted(exec, b, e, static_cast<int>(r));
  }
}

template <class T>
void GradientAverager<T>::start_counted(const ExecSpace& exec, std::size_t begin, std::size_t end, int root) {
  if (!last_micro_step_) ++counters_.calls_before_last_micro_step;
  ++counters_.calls;
  counters_.bytes += static_cast<long long>((end - begin) * sizeof(T));
  ScopedTimer timer(counters_.seconds);
  start(exec, grads_.data() + begin, end - begin, root);
}

template <class T>
void GradientAverager<T>::gather_parameters(const ExecSpace& exec, const Vector<T>& values) {
  if (settings_.owners.empty()) throw Error(ExitCode::failure, "gathering parameters without owned spans");
  if (values.extent(0) != grads_.extent(0)) throw Error(ExitCode::failure, "gathering parameters: the buffer's size differs from the gradients'");
  ScopedTimer timer(counters_.gather_seconds);
  counters_.gather_calls += gather(exec, values, settings_.owners);
  counters_.gather_bytes += static_cast<long long>(values.extent(0) * sizeof(T));
}

template <class T>
void GradientAverager<T>::exchange_bytes(const ExecSpace& exec, void* data, std::size_t bytes) {
  ScopedTimer timer(counters_.exchange_seconds);
  counters_.exchange_calls += combine_bytes(exec, static_cast<unsigned char*>(data), bytes);
  counters_.exchange_bytes += static_cast<long long>(bytes);
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
  void sum_scalar(const ExecSpace&, double*) override {}

 protected:
  void start(const ExecSpace&, T*, std::size_t, int) override {}
  int gather(const ExecSpace&, const Vector<T>&, const std::vector<OwnedSpan>&) override { return 0; }
  int combine_bytes(const ExecSpace&, unsigned char*, std::size_t) override { return 0; }
  void wait(const ExecSpace&) override {}
};

}  // namespace

template <class T>
std::unique_ptr<GradientAverager<T>> make_gradient_averager(const ExecSpace& exec, const Vector<T>& grads,
                                                            int world_size, AveragingSettings settings) {
  if (world_size == 1) {
    settings.owners.clear();  // one rank owns everything: nothing to reduce or gather
    return std::make_unique<SingleRankAverager<T>>(grads, settings);
  }
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
