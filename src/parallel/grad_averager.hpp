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
//
// Under parallel.zero_stage: 1 (AveragingSettings::owners) each rank needs the average of its own
// span only: every bucket is reduced, piece by piece, to the rank that owns each piece (a
// reduce-scatter in buckets: each gradient crosses the network once instead of the all-reduce's
// twice), the other spans of a rank's buffer are left as they were, and after the update
// gather_parameters() gives every rank everyone's updated span.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/views.hpp"

namespace kgpt::parallel {

struct AveragingCounters {
  long long calls = 0;  // gradient collective calls (one per bucket, or per owner's piece of one)
  long long bytes = 0;  // gradient bytes handed to them
  long long calls_before_last_micro_step = 0;  // must stay 0: the contract forbids them
  double seconds = 0.0;  // host time inside the transport (starting, progressing, waiting)
  // parallel.zero_stage: 1: the all-gather of the updated parameters.
  long long gather_calls = 0;  // collective calls
  long long gather_bytes = 0;  // parameter bytes every rank holds after it (the whole buffer)
  double gather_seconds = 0.0;
  // parallel.share_muon: the exchange of Muon's orthogonalised updates.
  long long exchange_calls = 0;
  long long exchange_bytes = 0;  // bytes of the exchanged buffer
  double exchange_seconds = 0.0;
};

// One rank's part of the buffer: elements [begin, end).
struct OwnedSpan {
  std::size_t begin = 0, end = 0;
};

struct AveragingSettings {
  std::size_t bucket_elements = 0;  // a bucket starts once it holds this many gradients
  bool overlap = true;
  // Empty: every rank gets the average of every gradient (all-reduce). Otherwise one span per rank,
  // in rank order, covering the buffer: rank r gets the average of owners[r] only (reduce to owner).
  std::vector<OwnedSpan> owners;
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

  // With owners: every rank's `values` (same layout as the gradients) takes the owner's elements of
  // each span, as exec's later work sees them. Counted in the step's gather counters.
  void gather_parameters(const ExecSpace& exec, const Vector<T>& values);
  // Replaces *value (one double in the memory of the default execution space, written by exec's
  // earlier work) by its sum over the ranks, before exec's later work reads it.
  virtual void sum_scalar(const ExecSpace& exec, double* value) = 0;
  // Muon shared across ranks: every rank's `bytes` at `data` (memory of the default execution
  // space, written by exec's earlier work) are combined, before exec's later work reads them, so
  // that a byte one rank wrote and every other rank left zero holds that rank's value on every rank
  // (a bitwise or over MPI, a maximum of unsigned bytes over NCCL; bytes several ranks wrote are
  // not meant to be read). Each rank writes the matrices it orthogonalised and zeros elsewhere, so
  // every rank receives every update exactly as its owner computed it, whatever the type. Counted
  // in the step's exchange counters.
  void exchange_bytes(const ExecSpace& exec, void* data, std::size_t bytes);

  const AveragingCounters& step_counters() const { return counters_; }
  int world_size() const { return world_size_; }

 protected:
  // Starts averaging count elements at data once exec's pending work on them is done: onto every
  // rank for root < 0, onto rank `root` only otherwise (the others' elements are left unchanged).
  virtual void start(const ExecSpace& exec, T* data, std::size_t count, int root) = 0;
  // Every rank's values take rank r's elements of owners[r], as exec's later work sees them;
  // returns the number of collective calls made.
  virtual int gather(const ExecSpace& exec, const Vector<T>& values, const std::vector<OwnedSpan>& owners) = 0;
  // exchange_bytes's collective, in place; returns the calls made.
  virtual int combine_bytes(const ExecSpace& exec, unsigned char* data, std::size_t bytes) = 0;
  // Lets started collectives advance (called between backward blocks).
  virtual void progress() {}
  // Returns when every started collective has finished (or is ordered before exec's later work).
  virtual void wait(const ExecSpace& exec) = 0;

 private:
  void send(const ExecSpace& exec, std::size_t begin, std::size_t end);
  void start_counted(const ExecSpace& exec, std::size_t begin, std::size_t end, int root);

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
