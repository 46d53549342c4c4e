#include "parallel/mpi_averager.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

namespace kgpt::parallel {

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

template std::unique_ptr<GradientAverager<float>> make_mpi_averager(const Vector<float>&, int, AveragingSettings);
template std::unique_ptr<GradientAverager<double>> make_mpi_averager(const Vector<double>&, int, AveragingSettings);

}  // namespace kgpt::parallel
