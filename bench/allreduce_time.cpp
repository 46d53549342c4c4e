// Times MPI_Allreduce of a float buffer, as kgpt averages its gradients on CPU ranks, to calibrate
// the communication model of bench/multinode_links.py on a link: the collective's bus bandwidth,
// 2 (N-1)/N S / t, is the figure the model divides bytes by (as NCCL's busbw on GPUs).
//
//   srun --mpi=pmix -N2 build/bench/allreduce_time BYTES [REPEATS]     (or mpiexec)
//
// Rank 0 prints: bytes:S ranks:N repeats:R median_ms:T busbw_mb_s:B (two calls first, untimed).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long bytes = argc > 1 ? std::atoll(argv[1]) : 0;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  if (bytes <= 0 || bytes % 4 != 0 || repeats <= 0) {
    if (rank == 0) std::fprintf(stderr, "usage: allreduce_time BYTES (a multiple of 4) [REPEATS]\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<float> buffer(static_cast<std::size_t>(bytes / 4), 1.0f);
  std::vector<double> times;
  for (int i = 0; i < repeats + 2; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double seconds = MPI_Wtime() - start;
    double slowest = 0;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 2) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  if (rank == 0) {
    std::printf("bytes:%lld ranks:%d repeats:%d median_ms:%.3f busbw_mb_s:%.2f\n", bytes, size, repeats, median * 1e3,
                2.0 * (size - 1) / size * static_cast<double>(bytes) / median / 1e6);
  }
  MPI_Finalize();
  return 0;
}
