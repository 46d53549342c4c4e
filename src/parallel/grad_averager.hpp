#pragma once
// Gradient averaging across ranks (docs/design.md, section 5). One interface; the transports are
// implementations of their own: MPI (mpi_averager.hpp: CPU builds, in-place all-reduce of host
// memory), NCCL (nccl_averager.hpp: CUDA builds), and for a world of one rank the identity, which
// communicates nothing. make_gradient_averager is the one place that picks one.
//
// Per optimizer step the trainer calls begin_step(), begin_micro_step(last) before each micro-step,
// passes ready() to the last micro-step's backward, and calls finish() before clipping and the
// optimizer. Nothing is communicated before the last micro-step. With overlap on, ready(begin,
// end) says that gradients [begin, end) of the buffer are final; ranges that touch are merged and
// sent as one bucket once it holds bucket_elements or more, while the backward goes on. finish()
// sends what is left (the pending bucket and every range nobody reported, such as the tied
// embedding, which is final only at the end) and waits. With overlap off, finish() sends the whole
// buffer in one call.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/views.hpp"

namespace kgpt::parallel {

struct AveragingCounters {
  long long calls = 0;  // collective calls (one per bucket)
  long long bytes = 0;  // gradient bytes handed to them
  long long calls_before_last_micro_step = 0;  // must stay 0: the contract forbids them
  double seconds = 0.0;  // host time inside the transport (starting, progressing, waiting)
};

struct AveragingSettings {
  std::size_t bucket_elements = 0;  // a bucket starts once it holds this many gradients
  bool overlap = true;
};

template <class T>
class GradientAverager {
 public:
  // grads: the contiguous gradient buffer (memory of the default execution space).
  GradientAverager(const Vector<T>& grads, int world_size, AveragingSettings settings);
  virtual ~GradientAverager() = default;
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // The backward's loss scale is multiplied by this so that the collective leaves the mean over
  // ranks: 1 / world_size where the transport sums (MPI), 1 where it averages (NCCL's ncclAvg).
  virtual double backward_scale_factor() const = 0;
  virtual const char* transport() const = 0;

  void begin_step();
  void begin_micro_step(bool last);
  virtual void ready(const ExecSpace& exec, std::size_t begin, std::size_t end);
  virtual void finish(const ExecSpace& exec);

  const AveragingCounters& step_counters() const { return counters_; }
  int world_size() const { return world_size_; }

 protected:
  // Starts averaging count elements at data once exec's pending work on them is done.
  virtual void start(const ExecSpace& exec, T* data, std::size_t count) = 0;
  // Lets started collectives advance (called between backward blocks).
  virtual void progress() {}
  // Returns when every started collective has finished (or is ordered before exec's later work).
  virtual void wait(const ExecSpace& exec) = 0;

 private:
  void send(const ExecSpace& exec, std::size_t begin, std::size_t end);

  Vector<T> grads_;
  int world_size_;
  AveragingSettings settings_;
  AveragingCounters counters_;
  bool last_micro_step_ = false;
  std::pair<std::size_t, std::size_t> pending_{0, 0};
  std::vector<std::pair<std::size_t, std::size_t>> sent_;
};

// The transport for this world and build: the identity for one rank; with more, NCCL in CUDA
// builds (backend::Cuda) and MPI otherwise.
template <class T>
std::unique_ptr<GradientAverager<T>> make_gradient_averager(const ExecSpace& exec, const Vector<T>& grads,
                                                            int world_size, AveragingSettings settings);

}  // namespace kgpt::parallel
