#include "model/gemm/cuda.hpp"

#include <cublasLt.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/profile.hpp"

namespace kgpt::model::cuda_gemm {

namespace {

constexpr std::size_t kWorkspaceBytes = kCublasLtWorkspaceBytes;

std::string describe(const Product& p) {
  const char* epilogue = p.epilogue == Epilogue::gelu            ? ", GELU epilogue"
                         : p.epilogue == Epilogue::gelu_backward ? ", GELU backward epilogue"
                                                                 : "";
  const auto name = [](Type t) {
    return t == Type::bf16 ? "bf16" : t == Type::f32 ? "fp32" : t == Type::e4m3 ? "e4m3" : "e5m2";
  };
  const std::string inputs = p.a.type == p.b.type ? std::string(name(p.a.type)) + " inputs"
                                                  : std::string(name(p.a.type)) + " and " + name(p.b.type) + " inputs";
  return "m " + std::to_string(p.m) + ", n " + std::to_string(p.n) + ", k " + std::to_string(p.k) + ", batch " +
         std::to_string(p.count) + ", " + inputs + ", " + name(p.out) + " output" + epilogue;
}

void check(cublasStatus_t status, const char* what, const Product& p) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(ExitCode::failure, std::string("cuBLASLt: ") + what + " failed with status " +
                                       std::to_string(static_cast<int>(status)) + " (" + describe(p) + ")");
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ExitCode::failure, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

cudaDataType_t data_type(Type t) {
  switch (t) {
    case Type::bf16: return CUDA_R_16BF;
    case Type::e4m3: return CUDA_R_8F_E4M3;
    case Type::e5m2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

// The largest power of two up to 16 that divides the address: cuBLASLt picks kernels by alignment.
int alignment(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  int bytes = 16;
  while (bytes > 1 && address % static_cast<std::uintptr_t>(bytes) != 0) bytes /= 2;
  return bytes;
}

// Everything the choice of algorithm depends on; compared and hashed as bytes, so it is zeroed
// before it is filled (no padding holds stray bytes).
struct Key {
  std::int64_t m, n, k, count, lda, ldb, ldc, ldd, stride_a, stride_b, stride_c, stride_d, ldaux;
  int types, ops, bias, align_a, align_b, align_c, align_d, epilogue, align_aux, fp8;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&key);
    std::size_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i < sizeof(Key); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
  }
};

// A matmul ready to run: descriptors and the algorithm the heuristic chose; or, for a product with
// a GELU epilogue that cuBLASLt cannot run, a record that it cannot.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's others, for a product timed once
};

// Products with a side that is not a multiple of 8 are timed over the heuristic's candidates on
// their first call: there the heuristic's first choice can be several times slower than the best
// (gpt2's output head, 50,257 columns, measured on an H100 at 95 and 130 TFLOP/s against 711 and
// 838 for 50,304). Every other product takes the first choice, so that ranks running the same
// product (the optimizer's, on replicated weights) always run the same algorithm.
bool worth_timing(const Product& p) { return p.m % 8 != 0 || p.n % 8 != 0 || p.k % 8 != 0; }

constexpr int kCandidates = 16;

// What the timing of each such product found, for `kgpt bench --profile` to print.
std::vector<std::string>& choice_notes() {
  static std::vector<std::string> notes;
  return notes;
}

cublasLtMatrixLayout_t layout(Type type, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t count,
                              std::int64_t stride, const Product& p) {
  cublasLtMatrixLayout_t made = nullptr;
  check(cublasLtMatrixLayoutCreate(&made, data_type(type), static_cast<std::uint64_t>(rows),
                                   static_cast<std::uint64_t>(cols), ld),
        "cublasLtMatrixLayoutCreate", p);
  if (count > 1) {
    const int batch = static_cast<int>(count);
    check(cublasLtMatrixLayoutSetAttribute(made, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
          "batch count", p);
    check(cublasLtMatrixLayoutSetAttribute(made, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "batch stride", p);
  }
  return made;
}

class Engine {
 public:
  Engine() {
    cublasLtHandle_t made = nullptr;
    const cublasStatus_t status = cublasLtCreate(&made);
    if (status != CUBLAS_STATUS_SUCCESS) {
      throw Error(ExitCode::failure, "cuBLASLt: cublasLtCreate failed with status " + std::to_string(static_cast<int>(status)));
    }
    handle_ = made;
    check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc of the cuBLASLt workspace");
    profile::library_memory(static_cast<double>(kWorkspaceBytes));
  }
  // Kept until the process ends: Kokkos finalises the device before static destructors run.

  bool supported(const Product& p) { return plan_for(p).supported; }

  cublasStatus_t launch(cudaStream_t stream, const Product& p, const Plan& plan, const cublasLtMatmulAlgo_t& algo) {
    const void* c = p.beta != 0.0f ? p.c : p.d;
    return cublasLtMatmul(handle_, plan.desc, &p.alpha, p.b.data, plan.a, p.a.data, plan.b, &p.beta, c, plan.c, p.d,
                          plan.d, &algo, workspace_, kWorkspaceBytes, stream);
  }

  // Times each candidate on this call's operands (a warm-up, then three runs) and keeps the first,
  // in the heuristic's order, within 10% of the fastest: near-ties go to the same one every run.
  // Only for products that write D without reading it, so that running them again changes nothing.
  void choose_by_time(cudaStream_t stream, const Product& p, Plan& plan) {
    std::vector<cublasLtMatmulAlgo_t> candidates;
    candidates.swap(plan.candidates);  // timed once
    cudaEvent_t start = nullptr, stop = nullptr;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<float> ms(candidates.size(), -1.0f);
    float fastest = -1.0f;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (launch(stream, p, plan, candidates[i]) != CUBLAS_STATUS_SUCCESS) continue;
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      bool ran = true;
      for (int run = 0; run < 3 && ran; ++run) ran = launch(stream, p, plan, candidates[i]) == CUBLAS_STATUS_SUCCESS;
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      if (!ran) continue;
      check(cudaEventElapsedTime(&ms[i], start, stop), "cudaEventElapsedTime");
      if (fastest < 0 || ms[i] < fastest) fastest = ms[i];
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::string note = describe(p) + ": " + std::to_string(candidates.size()) + " candidates, ms of 3 runs:";
    for (const float t : ms) note += t >= 0 ? " " + std::to_string(t) : std::string(" refused");
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (ms[i] >= 0 && ms[i] <= 1.1f * fastest) {
        plan.algo = candidates[i];
        choice_notes().push_back(note + "; kept candidate " + std::to_string(i));
        return;
      }
    }
    choice_notes().push_back(note + "; none ran, kept the heuristic's first");
  }

  // Enqueues the product, or returns false having enqueued nothing for a GELU product cuBLASLt has
  // no algorithm for or refuses at the call (remembered as unsupported from then on), for the
  // caller to run the product and the activation apart. Any other refusal throws.
  bool run(cudaStream_t stream, const Product& p) {
    Plan& plan = plan_for(p);
    if (!plan.supported) return false;  // only GELU plans are made unsupported; others throw when made
    // The descriptor is shared by every product of this shape; the bias and GELU's input are this one's.
    if (p.bias != nullptr) {
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias),
            "bias pointer", p);
    }
    if (p.aux != nullptr) {
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux),
            "GELU input pointer", p);
    }
    if (p.a_scale != nullptr) set_scales(plan.desc, p);
    if (!plan.candidates.empty()) choose_by_time(stream, p, plan);
    const cublasStatus_t status = launch(stream, p, plan, plan.algo);
    if (status != CUBLAS_STATUS_SUCCESS && p.epilogue != Epilogue::none) {
      plan.supported = false;
      return false;
    }
    check(status, "cublasLtMatmul", p);
    return true;
  }

 private:
  Plan& plan_for(const Product& p) {
    const void* c = p.beta != 0.0f ? p.c : p.d;
    Key key;
    std::memset(&key, 0, sizeof key);
    key.m = p.m;
    key.n = p.n;
    key.k = p.k;
    key.count = p.count;
    key.lda = p.a.ld;
    key.ldb = p.b.ld;
    key.ldc = p.beta != 0.0f ? p.ldc : p.ldd;
    key.ldd = p.ldd;
    key.stride_a = p.a.stride;
    key.stride_b = p.b.stride;
    key.stride_c = p.beta != 0.0f ? p.stride_c : p.stride_d;
    key.stride_d = p.stride_d;
    key.types = (static_cast<int>(p.a.type) * 4 + static_cast<int>(p.b.type)) * 4 + static_cast<int>(p.out);
    key.fp8 = (p.a_scale != nullptr ? 1 : 0) + (p.fast_accumulation ? 2 : 0);
    key.ops = (p.a.transpose ? 1 : 0) + (p.b.transpose ? 2 : 0);
    key.bias = p.bias != nullptr ? 1 : 0;
    key.epilogue = static_cast<int>(p.epilogue);
    key.ldaux = p.ldaux;
    key.align_aux = p.aux != nullptr ? alignment(p.aux) : 0;
    key.align_a = alignment(p.a.data);
    key.align_b = alignment(p.b.data);
    key.align_c = alignment(c);
    key.align_d = alignment(p.d);
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
    return plans_.emplace(key, make_plan(p, key)).first->second;
  }

  // cuBLASLt's A is kgpt's B (see make_plan): its A scale is B's. cuBLASLt takes a scale pointer
  // that is not 16-byte aligned into its plan and refuses the product (status 15).
  static void set_scales(cublasLtMatmulDesc_t desc, const Product& p) {
    if (alignment(p.a_scale) < 16 || alignment(p.b_scale) < 16) {
      check(CUBLAS_STATUS_INVALID_VALUE, "FP8 scales not 16-byte aligned", p);
    }
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.b_scale, sizeof p.b_scale),
          "A scale pointer", p);
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.a_scale, sizeof p.a_scale),
          "B scale pointer", p);
  }

  // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: cuBLASLt sees B first, and
  // each row-major (rows x cols, ld) operand as a column-major (cols x rows, ld) one.
  Plan make_plan(const Product& p, const Key& key) {
    Plan plan;
    if (p.epilogue != Epilogue::none &&
        (p.aux == nullptr || p.ldaux % 8 != 0 || p.count != 1 || p.beta != 0.0f || p.alpha != 1.0f)) {
      // cuBLASLt's GELU epilogues want GELU's input with a leading dimension of a multiple of 8;
      // kgpt asks them for one plain product.
      plan.supported = false;
      return plan;
    }
    check(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", p);
    const cublasOperation_t trans_a = p.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t trans_b = p.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a), "transa", p);
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b), "transb", p);
    if (p.a_scale != nullptr) {
      // FP8 operands: Hopper's kernels take them with K contiguous in both (cuBLASLt's "TN").
      if (p.a.transpose || !p.b.transpose || p.count != 1) {
        check(CUBLAS_STATUS_INVALID_VALUE, "FP8 operands other than A (m x k) and B (n x k)", p);
      }
      set_scales(plan.desc, p);
      const std::int8_t fast = p.fast_accumulation ? 1 : 0;
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
            "fast accumulation", p);
    }
    if (p.bias != nullptr) {
      const cudaDataType_t bias_type = data_type(p.out);
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
            "bias type", p);
    }
    if (p.epilogue != Epilogue::none) {
      // The heuristic reads the input's address for its alignment.
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.ldaux, sizeof p.ldaux),
            "GELU input leading dimension", p);
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux),
            "GELU input pointer", p);
    }
    cublasLtEpilogue_t epilogue = p.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (p.epilogue == Epilogue::gelu) {
      epilogue = p.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    } else if (p.epilogue == Epilogue::gelu_backward) {
      epilogue = CUBLASLT_EPILOGUE_DGELU;
    }
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
            "epilogue", p);
    }
    plan.a = layout(p.b.type, p.b.cols, p.b.rows, p.b.ld, p.count, p.b.stride, p);
    plan.b = layout(p.a.type, p.a.cols, p.a.rows, p.a.ld, p.count, p.a.stride, p);
    plan.c = layout(p.out, p.n, p.m, key.ldc, p.count, key.stride_c, p);
    plan.d = layout(p.out, p.n, p.m, p.ldd, p.count, p.stride_d, p);

    cublasLtMatmulPreference_t preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate", p);
    const std::uint64_t workspace = kWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace),
          "workspace preference", p);
    const std::uint32_t align[4] = {static_cast<std::uint32_t>(key.align_b), static_cast<std::uint32_t>(key.align_a),
                                    static_cast<std::uint32_t>(key.align_c), static_cast<std::uint32_t>(key.align_d)};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      check(cublasLtMatmulPreferenceSetAttribute(preference, which[i], &align[i], sizeof align[i]), "alignment", p);
    }
    const bool timed = worth_timing(p) && (p.beta == 0.0f || p.c != p.d) && (p.aux == nullptr || p.aux != p.d);
    cublasLtMatmulHeuristicResult_t results[kCandidates]{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.d,
                                                                 preference, timed ? kCandidates : 1, results, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    if (p.epilogue != Epilogue::none && (status != CUBLAS_STATUS_SUCCESS || found == 0)) {
      // No GELU kernel for these operands: the caller runs the product and the activation apart.
      for (cublasLtMatrixLayout_t made : {plan.a, plan.b, plan.c, plan.d}) cublasLtMatrixLayoutDestroy(made);
      cublasLtMatmulDescDestroy(plan.desc);
      return Plan{nullptr, nullptr, nullptr, nullptr, nullptr, {}, false, {}};
    }
    check(status, "cublasLtMatmulAlgoGetHeuristic", p);
    if (found == 0) check(CUBLAS_STATUS_NOT_SUPPORTED, "finding an algorithm", p);
    plan.algo = results[0].algo;
    if (timed && found <= 1) choice_notes().push_back(describe(p) + ": the heuristic offers one algorithm");
    for (int i = 0; timed && found > 1 && i < found; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
    }
    return plan;
  }

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

Engine& engine() {
  static Engine* made = new Engine();  // never destroyed: see the Engine's constructor
  return *made;
}

}  // namespace

void prepare() { engine(); }

std::vector<std::string> choices() { return choice_notes(); }

bool supported(const Product& product) { return product.k != 0 && engine().supported(product); }

bool run_with_epilogue(cudaStream_t stream, const Product& product) {
  return product.k != 0 && engine().run(stream, product);
}

void run(cudaStream_t stream, const Product& product) {
  if (product.k == 0 && product.beta == 0.0f && product.bias == nullptr) {
    // cuBLASLt rejects K = 0; D is then beta C (+ bias): zero here.
    const std::size_t element = product.out == Type::bf16 ? 2 : 4;
    for (std::int64_t item = 0; item < product.count; ++item) {
      check(cudaMemset2DAsync(static_cast<char*>(product.d) + item * product.stride_d * element,
                              static_cast<std::size_t>(product.ldd) * element, 0,
                              static_cast<std::size_t>(product.n) * element, static_cast<std::size_t>(product.m),
                              stream),
            "cudaMemset2DAsync");
    }
    return;
  }
  if (product.k == 0) {
    throw Error(ExitCode::failure, "cuBLASLt: a product with K = 0 and beta or a bias (" + describe(product) + ")");
  }
  if (!engine().run(stream, product)) check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul", product);
}

}  // namespace kgpt::model::cuda_gemm
