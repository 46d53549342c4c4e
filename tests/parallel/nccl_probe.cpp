// Runs the NCCL transport of gradient averaging where it was compiled: in a CPU build, against the
// CUDA toolkit's NCCL (KGPT_NCCL_TRANSPORT). Started on two ranks or more. Without a CUDA device
// make_nccl_averager must refuse with an Error naming the rank; with one GPU per rank, the probe
// averages a buffer that differs by rank in device memory through the GradientAverager interface and
// checks the mean; then, as under parallel.zero_stage: 1, reduces each rank's span to its owner,
// all-gathers the spans and sums a scalar over the ranks, and checks each. A node with fewer GPUs than ranks cannot run that check (NCCL refuses two ranks on
// one GPU): the probe says "probe: SKIP" and ctest reports the test as skipped. Each rank prints
// "probe: OK" and exits 0 when what it saw is right; otherwise "probe: FAIL: why" and exit code 3.

#include <cuda_runtime_api.h>

#include <cmath>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "parallel/nccl_averager.hpp"
#include "parallel/world.hpp"

namespace {

using kgpt::parallel::AveragingSettings;

constexpr std::size_t kElements = 1000;
constexpr int kWrong = 3;

int wrong(const std::string& why) {
  std::cerr << "probe: FAIL: " << why << std::endl;
  return kWrong;
}

// No CUDA device: the averager must not start, and must say which rank lacks one.
int expect_missing_device() {
  const auto& world = kgpt::parallel::world();
  const std::string expected = "rank " + std::to_string(world.rank) + ": NCCL gradient averaging needs a CUDA device";
  kgpt::Vector<float> grads("grads", kElements);
  try {
    const auto averager = kgpt::parallel::make_nccl_averager<float>(grads, world.size, AveragingSettings{}, nullptr);
  } catch (const kgpt::Error& e) {
    // As kgpt's main prints a rank's failure.
    const std::string message = "rank " + std::to_string(kgpt::parallel::world().rank) + ": " + e.what();
    std::cerr << message << std::endl;
    if (message.compare(0, expected.size(), expected) != 0) {
      return wrong("expected a message starting with: " + expected);
    }
    if (e.code() != kgpt::ExitCode::failure) return wrong("expected exit code failure (1)");
    std::cout << "probe: OK" << std::endl;
    return 0;
  }
  return wrong("make_nccl_averager started although this process sees no CUDA device");
}

bool cuda_ok(cudaError_t result, const char* call) {
  if (result == cudaSuccess) return true;
  std::cerr << "probe: FAIL: " << call << " failed: " << cudaGetErrorString(result) << std::endl;
  return false;
}

// A CUDA device: rank r holds value(i) + r, so the average over n ranks is value(i) + (n - 1) / 2.
int average_on_device(int devices) {
  const auto& world = kgpt::parallel::world();
  const auto value = [](std::size_t i) { return static_cast<float>(i % 97); };
  std::vector<float> host(kElements);
  for (std::size_t i = 0; i < kElements; ++i) host[i] = value(i) + static_cast<float>(world.rank);

  if (!cuda_ok(cudaSetDevice(world.local_rank % devices), "cudaSetDevice")) return kWrong;
  void* memory = nullptr;
  if (!cuda_ok(cudaMalloc(&memory, kElements * sizeof(float)), "cudaMalloc")) return kWrong;
  float* const buffer = static_cast<float*>(memory);
  cudaStream_t stream = nullptr;
  bool ok = cuda_ok(cudaMemcpy(buffer, host.data(), kElements * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy") &&
            cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  long long calls = 0;
  if (ok) {
    // An unmanaged View over device memory, also in a CPU Kokkos build: the averager hands its
    // pointer to NCCL and never reads it on the host.
    const kgpt::Vector<float> grads(buffer, kElements);
    AveragingSettings settings;
    settings.bucket_elements = 256;
    settings.overlap = true;
    const auto averager = kgpt::parallel::make_nccl_averager<float>(grads, world.size, settings, stream);
    if (std::string(averager->transport()) != "nccl" || averager->backward_scale_factor() != 1.0) {
      std::cerr << "probe: FAIL: transport() or backward_scale_factor() is not NCCL's" << std::endl;
      ok = false;
    }
    const kgpt::ExecSpace exec;
    averager->begin_step();
    averager->begin_micro_step(true);
    averager->ready(exec, 0, 400);  // one bucket while the "backward" goes on, the rest in finish()
    averager->finish(exec);
    calls = averager->step_counters().calls;
  }
  ok = ok && cuda_ok(cudaMemcpy(host.data(), buffer, kElements * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (stream != nullptr) cudaStreamDestroy(stream);
  cudaFree(buffer);
  if (!ok) return kWrong;

  const float shift = static_cast<float>(world.size - 1) / 2;
  for (std::size_t i = 0; i < kElements; ++i) {
    const float expected = value(i) + shift;
    if (std::fabs(host[i] - expected) > 1e-5f * (1 + std::fabs(expected))) {
      return wrong("element " + std::to_string(i) + " is " + std::to_string(host[i]) + ", expected " +
                   std::to_string(expected));
    }
  }
  if (calls == 0) return wrong("finish() sent nothing");
  std::cout << "probe: OK: NCCL on a CUDA device, " << world.size << " rank(s), " << calls << " all-reduce call(s)"
            << std::endl;
  return 0;
}

// parallel.zero_stage: 1's collectives: rank r holds value(i) + r. After the reduce to owners each
// rank's own span holds the mean and the rest its own values; after the gather every element holds
// the mean; the scalar (rank + 1) sums to n (n + 1) / 2.
int reduce_to_owners_on_device() {
  const auto& world = kgpt::parallel::world();
  const auto value = [](std::size_t i) { return static_cast<float>(i % 89); };
  std::vector<float> host(kElements);
  for (std::size_t i = 0; i < kElements; ++i) host[i] = value(i) + static_cast<float>(world.rank);
  AveragingSettings settings;
  settings.bucket_elements = 300;
  for (int r = 0; r < world.size; ++r) {
    settings.owners.push_back({kElements * r / world.size, kElements * (r + 1) / world.size});
  }
  const kgpt::parallel::OwnedSpan own = settings.owners[static_cast<std::size_t>(world.rank)];
  void* memory = nullptr;
  if (!cuda_ok(cudaMalloc(&memory, (kElements + 1) * sizeof(double)), "cudaMalloc")) return kWrong;
  float* const buffer = static_cast<float*>(memory);
  double* const scalar = static_cast<double*>(memory) + kElements;  // after the floats, 8-byte aligned
  const double mine = world.rank + 1.0;
  cudaStream_t stream = nullptr;
  bool ok = cuda_ok(cudaMemcpy(buffer, host.data(), kElements * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy") &&
            cuda_ok(cudaMemcpy(scalar, &mine, sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy") &&
            cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::vector<float> reduced(kElements);
  double sum = 0;
  long long calls = 0, gather_calls = 0;
  if (ok) {
    const kgpt::Vector<float> grads(buffer, kElements);
    const auto averager = kgpt::parallel::make_nccl_averager<float>(grads, world.size, settings, stream);
    const kgpt::ExecSpace exec;
    averager->begin_step();
    averager->begin_micro_step(true);
    averager->ready(exec, kElements / 3, kElements);  // crosses an owner's boundary
    averager->finish(exec);
    ok = cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize") &&
         cuda_ok(cudaMemcpy(reduced.data(), buffer, kElements * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (ok) {
      averager->gather_parameters(exec, grads);
      averager->sum_scalar(exec, scalar);
      calls = averager->step_counters().calls;
      gather_calls = averager->step_counters().gather_calls;
    }
  }
  ok = ok && cuda_ok(cudaMemcpy(host.data(), buffer, kElements * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy") &&
       cuda_ok(cudaMemcpy(&sum, scalar, sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (stream != nullptr) cudaStreamDestroy(stream);
  cudaFree(memory);
  if (!ok) return kWrong;
  const float mean_shift = static_cast<float>(world.size - 1) / 2;
  for (std::size_t i = 0; i < kElements; ++i) {
    const bool owned = i >= own.begin && i < own.end;
    const float after_reduce = value(i) + (owned ? mean_shift : static_cast<float>(world.rank));
    if (std::fabs(reduced[i] - after_reduce) > 1e-5f * (1 + std::fabs(after_reduce))) {
      return wrong("after the reduce to owners, element " + std::to_string(i) + " is " + std::to_string(reduced[i]) +
                   ", expected " + std::to_string(after_reduce));
    }
    const float gathered = value(i) + mean_shift;
    if (std::fabs(host[i] - gathered) > 1e-5f * (1 + std::fabs(gathered))) {
      return wrong("after the gather, element " + std::to_string(i) + " is " + std::to_string(host[i]) + ", expected " +
                   std::to_string(gathered));
    }
  }
  if (sum != world.size * (world.size + 1) / 2.0) return wrong("the scalar's sum is " + std::to_string(sum));
  std::cout << "probe: OK: reduce to owners (" << calls << " calls), all-gather (" << gather_calls
            << " calls) and a scalar's sum" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kgpt::parallel::MpiSession mpi(&argc, &argv);
  try {
    const kgpt::compat::Runtime kokkos;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return expect_missing_device();
    const auto& world = kgpt::parallel::world();
    if (world.size < 2) return wrong("start the probe on two ranks or more: one rank averages nothing");
    if (devices < world.local_size) {
      std::cout << "probe: SKIP: " << world.local_size << " ranks on this node need as many GPUs; it has " << devices
                << std::endl;
      return 0;
    }
    const int averaged = average_on_device(devices);
    return averaged != 0 ? averaged : reduce_to_owners_on_device();
  } catch (const kgpt::Error& e) {
    std::cerr << e.what() << std::endl;
    const int code = static_cast<int>(e.code());
    return code != 0 ? code : kWrong;
  } catch (const std::exception& e) {
    std::cerr << "probe: FAIL: internal error: " << e.what() << std::endl;
    return kWrong;
  }
}
