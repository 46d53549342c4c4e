#pragma once
// Gradient averaging across ranks (semantic contract, point 5). One interface, two transports:
// MPI (CPU builds: in-place all-reduce of host memory) and NCCL (CUDA builds, nccl_averager.hpp).
//
// Per optimizer step the trainer calls begin_step(), begin_micro_step(last) before each micro-step,
// passes ready() to the last micro-step's backward, and calls finish() before clipping and the
// optimizer. Nothing is communicated before the last micro-step. With overlap on, ready(begin,
// end) says that gradients [begin, end) of the buffer are final; ranges that touch are merged and
// sent as one bucket once it holds bucket_elements or more, while the backward goes on. finish()
// sends what is left (the pending bucket and every range nobody reported, such as the tied
// embedding, which is final only at the end) and waits. With overlap off, finish() sends the whole
// buffer in one call. A world of one rank communicates nothing.

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
  void ready(const ExecSpace& exec, std::size_t begin, std::size_t end);
  void finish(const ExecSpace& exec);

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

// The MPI transport: MPI_Iallreduce(MPI_IN_PLACE, MPI_SUM) per bucket on host memory.
template <class T>
std::unique_ptr<GradientAverager<T>> make_mpi_averager(const Vector<T>& grads, int world_size,
                                                       AveragingSettings settings);

// The transport for this build: NCCL when gradients live in CUDA memory and NCCL is compiled in,
// MPI otherwise.
template <class T>
std::unique_ptr<GradientAverager<T>> make_gradient_averager(const ExecSpace& exec, const Vector<T>& grads,
                                                            int world_size, AveragingSettings settings);

}  // namespace kgpt::parallel
