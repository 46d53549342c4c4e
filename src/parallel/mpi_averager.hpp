#pragma once
// The MPI transport of gradient averaging (CPU builds): MPI_Iallreduce(MPI_IN_PLACE, MPI_SUM) per
// bucket on host memory, progressed between backward blocks and waited for in finish(). The loss
// scale carries the 1 / world_size, so the sum is the mean.

#include <memory>

#include "parallel/grad_averager.hpp"

namespace kgpt::parallel {

template <class T>
std::unique_ptr<GradientAverager<T>> make_mpi_averager(const Vector<T>& grads, int world_size,
                                                       AveragingSettings settings);

}  // namespace kgpt::parallel
