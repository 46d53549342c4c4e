#include "parallel/grad_averager.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#ifdef KGPT_HAVE_NCCL
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
  if (world_size_ == 1 || !settings_.overlap || !last_micro_step_ || begin >= end) return;
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
  if (world_size_ == 1) return;
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

template <class T>
class MpiAverager final : public GradientAverager<T> {
 public:
  MpiAverager(const Vector<T>& grads, int world_size, AveragingSettings settings)
      : GradientAverager<T>(grads, world_size, settings) {}

  double backward_scale_factor() const override { return 1.0 / this->world_size(); }
  const char* transport() const override { return "mpi"; }

 protected:
  void start(const ExecSpace& exec, T* data, std::size_t count) override {
    // MPI does not know Kokkos' queue: the gradients must be written before MPI reads them.
    exec.fence();
    const MPI_Datatype type = std::is_same<T, float>::value ? MPI_FLOAT : MPI_DOUBLE;
    while (count > 0) {
      const int chunk = static_cast<int>(std::min<std::size_t>(count, INT_MAX));
      MPI_Request request;
      const int code = MPI_Iallreduce(MPI_IN_PLACE, data, chunk, type, MPI_SUM, MPI_COMM_WORLD, &request);
      if (code != MPI_SUCCESS) throw Error(ExitCode::failure, "gradient averaging: MPI_Iallreduce failed");
      requests_.push_back(request);
      data += chunk;
      count -= static_cast<std::size_t>(chunk);
    }
  }

  void progress() override {
    if (requests_.empty()) return;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
  }

  void wait(const ExecSpace&) override {
    const int code = MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    if (code != MPI_SUCCESS) throw Error(ExitCode::failure, "gradient averaging: MPI_Waitall failed");
  }

 private:
  std::vector<MPI_Request> requests_;
};

}  // namespace

template <class T>
std::unique_ptr<GradientAverager<T>> make_mpi_averager(const Vector<T>& grads, int world_size,
                                                       AveragingSettings settings) {
  return std::make_unique<MpiAverager<T>>(grads, world_size, settings);
}

template <class T>
std::unique_ptr<GradientAverager<T>> make_gradient_averager(const ExecSpace& exec, const Vector<T>& grads,
                                                            int world_size, AveragingSettings settings) {
#if defined(KGPT_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  // One rank communicates nothing: no NCCL communicator for it.
  if (world_size > 1 && std::is_same<typename Vector<T>::memory_space, Kokkos::CudaSpace>::value) {
    return make_nccl_averager<T>(grads, world_size, settings, exec.cuda_stream());
  }
#endif
  (void)exec;
  return make_mpi_averager<T>(grads, world_size, settings);
}

template std::unique_ptr<GradientAverager<float>> make_mpi_averager(const Vector<float>&, int, AveragingSettings);
template std::unique_ptr<GradientAverager<double>> make_mpi_averager(const Vector<double>&, int, AveragingSettings);
template std::unique_ptr<GradientAverager<float>> make_gradient_averager(const ExecSpace&, const Vector<float>&, int,
                                                                         AveragingSettings);
template std::unique_ptr<GradientAverager<double>> make_gradient_averager(const ExecSpace&, const Vector<double>&,
                                                                          int, AveragingSettings);

}  // namespace kgpt::parallel
