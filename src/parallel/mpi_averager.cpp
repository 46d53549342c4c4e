#include "parallel/mpi_averager.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "parallel/world.hpp"

namespace kgpt::parallel {

namespace {

template <class T>
MPI_Datatype mpi_type() {
  return std::is_same<T, float>::value ? MPI_FLOAT : MPI_DOUBLE;
}

void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw Error(ExitCode::failure, std::string("gradient averaging: ") + call + " failed");
}

template <class T>
class MpiAverager final : public GradientAverager<T> {
 public:
  MpiAverager(const Vector<T>& grads, int world_size, AveragingSettings settings)
      : GradientAverager<T>(grads, world_size, settings) {}

  double backward_scale_factor() const override { return 1.0 / this->world_size(); }
  const char* transport() const override { return "mpi"; }

 protected:
  void start(const ExecSpace& exec, T* data, std::size_t count, int root) override {
    // MPI does not know Kokkos' queue: the gradients must be written before MPI reads them.
    exec.fence();
    const int rank = world().rank;
    while (count > 0) {
      const int chunk = static_cast<int>(std::min<std::size_t>(count, INT_MAX));
      MPI_Request request;
      if (root < 0) {
        check(MPI_Iallreduce(MPI_IN_PLACE, data, chunk, mpi_type<T>(), MPI_SUM, MPI_COMM_WORLD, &request),
              "MPI_Iallreduce");
      } else {
        // In place at the owner; the others only send (their receive buffer is not used).
        check(MPI_Ireduce(rank == root ? MPI_IN_PLACE : data, data, chunk, mpi_type<T>(), MPI_SUM, root, MPI_COMM_WORLD,
                          &request),
              "MPI_Ireduce");
      }
      requests_.push_back(request);
      data += chunk;
      count -= static_cast<std::size_t>(chunk);
    }
  }

  int gather(const ExecSpace& exec, const Vector<T>& values, const std::vector<OwnedSpan>& owners) override {
    std::vector<std::size_t> begins, sizes;
    for (const OwnedSpan& span : owners) {
      begins.push_back(span.begin);
      sizes.push_back(span.end - span.begin);
    }
    const std::vector<int> displacements = mpi_counts(begins, "gathering parameters"),
                           counts = mpi_counts(sizes, "gathering parameters");
    mpi_counts({owners.back().end}, "gathering parameters");  // the whole buffer, as before: the spans tile it
    // MPI reads host memory here: a device buffer goes through a host copy.
    auto host = Kokkos::create_mirror_view(values);
    Kokkos::deep_copy(exec, host, values);
    exec.fence();
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host.data(), counts.data(), displacements.data(),
                         mpi_type<T>(), MPI_COMM_WORLD),
          "MPI_Allgatherv");
    Kokkos::deep_copy(exec, values, host);
    return 1;
  }

  int combine_bytes(const ExecSpace& exec, unsigned char* data, std::size_t bytes) override {
    // MPI reads host memory (a CPU build's MemSpace); the bytes must be written first.
    exec.fence();
    int calls = 0;
    while (bytes > 0) {
      const int chunk = static_cast<int>(std::min<std::size_t>(bytes, INT_MAX));
      check(MPI_Allreduce(MPI_IN_PLACE, data, chunk, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD), "MPI_Allreduce (Muon's updates)");
      data += chunk;
      bytes -= static_cast<std::size_t>(chunk);
      ++calls;
    }
    return calls;
  }

  void sum_scalar(const ExecSpace& exec, double* value) override {
    const Kokkos::View<double, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> device(value);
    auto host = Kokkos::create_mirror_view(device);
    Kokkos::deep_copy(exec, host, device);
    exec.fence();
    sum_in_place(host.data(), 1);
    Kokkos::deep_copy(exec, device, host);
  }

  void progress() override {
    if (requests_.empty()) return;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
  }

  void wait(const ExecSpace&) override {
    const int code = MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    check(code, "MPI_Waitall");
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

template std::unique_ptr<GradientAverager<float>> make_mpi_averager(const Vector<float>&, int, AveragingSettings);
template std::unique_ptr<GradientAverager<double>> make_mpi_averager(const Vector<double>&, int, AveragingSettings);

}  // namespace kgpt::parallel
