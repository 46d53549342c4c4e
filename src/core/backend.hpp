#pragma once
// The one place that chooses between host and CUDA implementations (docs/design.md, "Host and CUDA
// seams", lists each seam). Where the two differ in code (GEMM, attention, the embedding gradient,
// the gradient transport) an interface is a template over the backend tag with a host and a CUDA
// implementation in files of their own; where they differ in how work is laid out on threads, the
// backend's Traits below say how, and kernels read them instead of testing the backend. Every caller
// reaches the backend named by backend::Current, fixed here by the Kokkos the build was made with.

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#define KGPT_BACKEND_CUDA 1
#else
#define KGPT_BACKEND_CUDA 0
#endif

namespace kgpt::backend {

struct Host {
  static constexpr const char* name = "host";
};
struct Cuda {
  static constexpr const char* name = "cuda";
};

template <class Backend>
struct BackendTraits;

// The host: every team is one thread, which walks rows in order with the columns inside, so that
// the compiler vectorises the inner loops.
template <>
struct BackendTraits<Host> {
  // ops::ColumnSums: columns a team of threads takes (0: one team takes every column).
  static constexpr int column_sum_team_columns = 0;
  // ops::map_elements and the row kernels (PackedRows): each thread converts 16 bytes at once (else
  // one element, in a plain loop).
  static constexpr bool packed_elementwise = false;
  // The cross-entropy over rows of logits: each thread reads 16 bytes of a row at once and the
  // forward reads the row once (a running maximum and sum), else two plain passes that vectorise.
  static constexpr bool packed_logits = false;
  // The token embedding's gradient: rows sorted by token and summed in segments (else one pass per
  // channel over every row, in order); the models allocate the sort's workspace only when true.
  static constexpr bool sorted_embedding_gradient = false;
  // Optimizer updates: a device scalar (the clipping factor) read by every thread (else read once on
  // the host), and the gradient norm summed by a device reduction (else per chunk, vectorised).
  static constexpr bool device_scalars = false;
  // The output head's logits and dx products: as wide as the logits' rows (the vocabulary rounded
  // up to 64, the weights copied into a zero-padded matrix), else as wide as the vocabulary.
  static constexpr bool padded_head_products = false;
  // Adam's tensors updated in one launch (else one launch per tensor, each a vectorised loop).
  static constexpr bool fused_adam = false;
  // model.fp8's products on 1-byte operands in the tensor cores (else bf16 products of operands
  // rounded to FP8 values, which compute the same up to the order of the sums).
  static constexpr bool fp8_products = false;
};

// CUDA: a warp must read consecutive addresses and the GPU must hold tens of thousands of threads.
template <>
struct BackendTraits<Cuda> {
  static constexpr int column_sum_team_columns = 128;
  static constexpr bool packed_elementwise = true;
  static constexpr bool packed_logits = true;
  static constexpr bool sorted_embedding_gradient = true;
  static constexpr bool device_scalars = true;
  static constexpr bool padded_head_products = true;
  static constexpr bool fused_adam = true;
  static constexpr bool fp8_products = true;
};

#if KGPT_BACKEND_CUDA
using Current = Cuda;
// Host memory the device copies from without the host waiting: page-locked on CUDA.
using StagingSpace = Kokkos::CudaHostPinnedSpace;
#else
using Current = Host;
using StagingSpace = Kokkos::HostSpace;
#endif

using Traits = BackendTraits<Current>;
constexpr bool on_gpu = std::is_same<Current, Cuda>::value;

// Whether this build has cuDNN's fused attention (a CUDA build that found cuDNN and cudnn-frontend).
#ifdef KGPT_HAVE_CUDNN
constexpr bool cudnn_built = true;
#else
constexpr bool cudnn_built = false;
#endif

}  // namespace kgpt::backend
