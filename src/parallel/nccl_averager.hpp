#pragma once
// The NCCL transport of gradient averaging. In CUDA builds the gradients live in device memory and
// NCCL all-reduces them (ncclAvg) on a stream of its own: an event recorded on the compute stream
// orders each bucket after its part of the backward without a host fence, so the averaging of the
// later layers runs while the backward of the earlier ones goes on; an event recorded after the last
// bucket orders the optimizer after it.
// kgpt compiles it in CUDA builds only; CPU builds may compile it against the CUDA toolkit's NCCL
// for its test (KGPT_NCCL_TRANSPORT, tests/parallel/nccl_probe.cpp).

#include <cuda_runtime_api.h>

#include <memory>

#include "parallel/grad_averager.hpp"

namespace kgpt::parallel {

// Starts one NCCL communicator over MPI_COMM_WORLD: a collective, called by every rank with the CUDA
// device it uses already current, and world_size the size of MPI_COMM_WORLD. grads: device memory;
// stream: where the kernels that write the gradients run. Throws Error naming the rank when this
// process sees no CUDA device or NCCL cannot start.
template <class T>
std::unique_ptr<GradientAverager<T>> make_nccl_averager(const Vector<T>& grads, int world_size,
                                                        AveragingSettings settings, cudaStream_t stream);

}  // namespace kgpt::parallel
