// The NCCL transport's calls on a GPU with a world of one rank (a CUDA build with NCCL only): the
// bucketed all-reduce, the reduce to an owner and the parameter all-gather of parallel.zero_stage:
// 1, a scalar's sum, and the exchange of Muon's updates of parallel.share_muon. With one rank
// kgpt's steps never start NCCL (the identity averager runs), so this is where a one-GPU machine
// runs those calls; on one rank each must leave the values as they are, bit for bit, and be counted.
// Two ranks and more: tests/parallel/nccl_probe.cpp.
#include <catch2/catch.hpp>

#include "core/backend.hpp"

#if KGPT_BACKEND_CUDA && defined(KGPT_HAVE_NCCL)

#include <cstring>
#include <string>
#include <vector>

#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "parallel/nccl_averager.hpp"
#include "parallel/world.hpp"

using namespace kgpt;

TEST_CASE("NCCL on one rank: averaging, owners, all-gather, sums and Muon's exchange", "[parallel][nccl]") {
  // MPI for this process (no mpiexec: a singleton), kept until the process ends.
  static parallel::MpiSession mpi(nullptr, nullptr);
  REQUIRE(parallel::world().size == 1);
  const ExecSpace exec;
  constexpr std::size_t n = 10000;
  Vector<float> grads("grads", n);
  random::fill_normal(grads, 5, 0, 1.0);
  const std::vector<float> before = to_host(grads);
  for (const bool owners : {false, true}) {
    const std::string arrangement = owners ? "reduce to the owner, then all-gather (zero stage 1)" : "all-reduce in buckets";
    INFO(arrangement);
    parallel::AveragingSettings settings;
    settings.bucket_elements = 1000;
    if (owners) settings.owners = {{0, n}};
    const auto averager = parallel::make_nccl_averager<float>(grads, 1, settings, exec.cuda_stream());
    CHECK(std::string(averager->transport()) == "nccl");
    CHECK(averager->backward_scale_factor() == 1.0);
    averager->begin_step();
    averager->begin_micro_step(true);
    averager->ready(exec, 6000, n);  // the later layers first, as the backward reports them
    averager->ready(exec, 2000, 6000);
    averager->finish(exec);
    if (owners) averager->gather_parameters(exec, grads);
    exec.fence();
    const parallel::AveragingCounters& counted = averager->step_counters();
    CHECK(counted.calls >= 2);
    CHECK(counted.bytes == static_cast<long long>(n * sizeof(float)));
    CHECK(counted.calls_before_last_micro_step == 0);
    CHECK(counted.gather_calls == (owners ? 1 : 0));
    CHECK(to_host(grads) == before);  // the average over one rank

    Kokkos::View<double, MemSpace> scalar("scalar");
    Kokkos::deep_copy(scalar, 2.5);
    averager->sum_scalar(exec, scalar.data());
    double summed = 0;
    Kokkos::deep_copy(summed, scalar);
    CHECK(summed == 2.5);

    // Muon's exchange: any bytes, NaN patterns and negative zeros among them, come back as they went.
    Kokkos::View<unsigned char*, MemSpace> bytes("bytes", 4099);
    auto host = Kokkos::create_mirror_view(bytes);
    for (std::size_t i = 0; i < host.extent(0); ++i) host(i) = static_cast<unsigned char>((i * 2654435761u) >> 13);
    Kokkos::deep_copy(bytes, host);
    averager->exchange_bytes(exec, bytes.data(), bytes.extent(0));
    auto back = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes);
    CHECK(std::memcmp(back.data(), host.data(), host.extent(0)) == 0);
    CHECK(averager->step_counters().exchange_calls == 1);
    CHECK(averager->step_counters().exchange_bytes == 4099);
  }
}

#endif
