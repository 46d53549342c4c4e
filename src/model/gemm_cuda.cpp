#include "model/gemm_cuda.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>

#include "core/error.hpp"

namespace kgpt::model::cublas {

namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(ExitCode::failure, std::string("cuBLAS: ") + what + " failed with status " + std::to_string(static_cast<int>(status)));
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ExitCode::failure, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
  }
}

// One handle per process, made on first use on the current device and kept until exit (destroying
// it after Kokkos has finalised the device would be too late, and the process ends there anyway).
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    check(cublasCreate(&made), "cublasCreate");
    // Keep stream-ordered temporaries in the pool between steps instead of returning them.
    int device = 0;
    cudaMemPool_t pool = nullptr;
    if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      std::uint64_t keep = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    return made;
  }();
  return h;
}

__global__ void to_bf16(const float* __restrict__ in, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                        std::int64_t stride, std::int64_t count, __nv_bfloat16* __restrict__ out) {
  const std::int64_t per_item = rows * cols, total = per_item * count;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t item = i / per_item, r = (i % per_item) / cols, c = i % cols;
    out[i] = __float2bfloat16_rn(in[item * stride + r * ld + c]);
  }
}

// The common case, an operand already contiguous: a flat conversion without index arithmetic
// (64-bit division per element costs more than the conversion itself).
__global__ void to_bf16_flat(const float* __restrict__ in, std::int64_t total, __nv_bfloat16* __restrict__ out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

// Packs an operand as bf16, rows x cols contiguous per item, items back to back.
__nv_bfloat16* packed_bf16(cudaStream_t stream, const Operand& x, std::int64_t count) {
  const std::int64_t total = x.rows * x.cols * count;
  void* memory = nullptr;
  check(cudaMallocAsync(&memory, static_cast<std::size_t>(total) * sizeof(__nv_bfloat16), stream), "cudaMallocAsync");
  auto* out = static_cast<__nv_bfloat16*>(memory);
  const int threads = 256;
  const std::int64_t blocks = (total + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  const bool contiguous = x.ld == x.cols && (count == 1 || x.stride == x.rows * x.cols);
  if (contiguous) {
    to_bf16_flat<<<grid, threads, 0, stream>>>(x.data, total, out);
  } else {
    to_bf16<<<grid, threads, 0, stream>>>(x.data, x.rows, x.cols, x.ld, x.stride, count, out);
  }
  check(cudaGetLastError(), "bf16 conversion kernel");
  return out;
}

}  // namespace

void gemm(cudaStream_t stream, bool bf16, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const Operand& a, const Operand& b, float beta, const Output& c, std::int64_t count) {
  cublasHandle_t h = handle();
  check(cublasSetStream(h, stream), "cublasSetStream");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS sees B first.
  const cublasOperation_t op_b = b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!bf16) {
    check(cublasSgemmStridedBatched(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                                    b.data, static_cast<int>(b.ld), b.stride, a.data, static_cast<int>(a.ld), a.stride,
                                    &beta, c.data, static_cast<int>(c.ld), c.stride, static_cast<int>(count)),
          "cublasSgemmStridedBatched");
    return;
  }
  __nv_bfloat16* a16 = packed_bf16(stream, a, count);
  __nv_bfloat16* b16 = packed_bf16(stream, b, count);
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b16, CUDA_R_16BF,
      static_cast<int>(b.cols), b.rows * b.cols, a16, CUDA_R_16BF, static_cast<int>(a.cols), a.rows * a.cols, &beta,
      c.data, CUDA_R_32F, static_cast<int>(c.ld), c.stride, static_cast<int>(count), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  check(cudaFreeAsync(a16, stream), "cudaFreeAsync");
  check(cudaFreeAsync(b16, stream), "cudaFreeAsync");
  check(status, "cublasGemmStridedBatchedEx (bf16)");
}

}  // namespace kgpt::model::cublas
