#include "probes/attention.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/random.hpp"
#include "core/text.hpp"
#include "model/attention/attention.hpp"
#ifdef KGPT_HAVE_CUDNN
#include "model/attention/cudnn.hpp"
#endif

namespace kgpt::probes {

using namespace kgpt::model;  // the probes run the models' own pieces

namespace {

// One layer's attention tensors as a model holds them: QKV (N, (H + 2 KV) D), O and dO (N, H D),
// and dQKV like QKV.
template <class A>
struct Tensors {
  int batch, seq, heads, kv, dim;
  Matrix<A> qkv, o, d_o, d_qkv;
  Tensors(int b, int t, int h, int kv_heads, int d)
      : batch(b), seq(t), heads(h), kv(kv_heads), dim(d),
        qkv("kgpt::probe::qkv", static_cast<std::size_t>(b) * t, static_cast<std::size_t>(h + 2 * kv_heads) * d),
        o("kgpt::probe::o", static_cast<std::size_t>(b) * t, static_cast<std::size_t>(h) * d),
        d_o("kgpt::probe::d_o", static_cast<std::size_t>(b) * t, static_cast<std::size_t>(h) * d),
        d_qkv("kgpt::probe::d_qkv", static_cast<std::size_t>(b) * t, static_cast<std::size_t>(h + 2 * kv_heads) * d) {}

  Heads<const A> in(const Matrix<A>& m, int offset, int count) const {
    return heads_of(ConstMatrix<A>(m), offset, batch, count, dim);
  }
  Heads<A> out(const Matrix<A>& m, int offset, int count) const { return heads_of(m, offset, batch, count, dim); }

  // Forward then backward; returns the two calls' milliseconds, each fenced.
  std::pair<double, double> run(Attention<A>& attention, const ExecSpace& exec) {
    const int k0 = heads * dim, v0 = (heads + kv) * dim;
    using Clock = std::chrono::steady_clock;
    exec.fence();
    const auto start = Clock::now();
    attention.forward(exec, 0, in(qkv, 0, heads), in(qkv, k0, kv), in(qkv, v0, kv), out(o, 0, heads));
    exec.fence();
    const auto middle = Clock::now();
    attention.backward(exec, 0, in(qkv, 0, heads), in(qkv, k0, kv), in(qkv, v0, kv), in(o, 0, heads),
                       in(d_o, 0, heads), out(d_qkv, 0, heads), out(d_qkv, k0, kv), out(d_qkv, v0, kv));
    exec.fence();
    const auto end = Clock::now();
    return {std::chrono::duration<double, std::milli>(middle - start).count(),
            std::chrono::duration<double, std::milli>(end - middle).count()};
  }
};

// max |a - b| / (1 + max |b|); infinite when a value is not finite.
double difference(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 0, worst = 0;
  for (double x : b) scale = std::max(scale, std::fabs(x));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst / (1 + scale);
}

template <class A>
AttentionProbe probe(const config::ModelConfig& m, int batch, int seq) {
  AttentionProbe result;
  const config::Attention choice = resolve_attention(m);
  result.attention = config::name_of(choice);
  result.batch = batch;
  result.seq = seq;
  const HeadShape heads = head_shape(m);
  result.heads = heads.heads;
  result.kv_heads = heads.kv_heads;
  result.head_dim = heads.dim;
  const ExecSpace exec;
  AttentionShape shape = attention_shape(m, batch, seq);
  shape.layers = 1;
  {
    Tensors<A> t(batch, seq, result.heads, result.kv_heads, result.head_dim);
    random::fill_normal(t.qkv, 41, 0, 1.0);
    random::fill_normal(t.d_o, 41, 1, 1.0);
    auto attention = make_attention<A>(choice, shape, "kgpt::probe::");
    t.run(*attention, exec);  // builds what the implementation builds on first use (cuDNN's graphs)
    std::tie(result.forward_ms, result.backward_ms) = t.run(*attention, exec);
#ifdef KGPT_HAVE_CUDNN
    if constexpr (std::is_same<A, bf16>::value) {
      if (const auto* cudnn = dynamic_cast<const CudnnAttention*>(attention.get())) {
        result.workspace_bytes = static_cast<double>(cudnn->workspace_bytes());
        result.workspace_estimate_bytes = static_cast<double>(cudnn_workspace_estimate(shape));
      }
    }
#endif
  }

  // One sequence against another implementation, in fp32, on the same (rounded) inputs.
  const bool fused_fits = config::attention_runs(config::Attention::fused, result.head_dim, m.precision);
  const config::Attention other = choice != config::Attention::gemm ? config::Attention::gemm
                                  : fused_fits                      ? config::Attention::fused
                                                                    : config::Attention::gemm;
  if (other == choice) return result;
  result.compared_with = config::name_of(other);
  AttentionShape one = shape;
  one.max_batch = 1;
  Tensors<A> probed(1, seq, result.heads, result.kv_heads, result.head_dim);
  random::fill_normal(probed.qkv, 43, 0, 1.0);
  random::fill_normal(probed.d_o, 43, 1, 1.0);
  Tensors<float> reference(1, seq, result.heads, result.kv_heads, result.head_dim);
  {
    // The reference reads exactly the values the probed implementation reads.
    auto host_in = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), probed.qkv);
    auto host_do = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), probed.d_o);
    auto ref_in = Kokkos::create_mirror_view(reference.qkv);
    auto ref_do = Kokkos::create_mirror_view(reference.d_o);
    for (std::size_t i = 0; i < ref_in.span(); ++i) ref_in.data()[i] = static_cast<float>(host_in.data()[i]);
    for (std::size_t i = 0; i < ref_do.span(); ++i) ref_do.data()[i] = static_cast<float>(host_do.data()[i]);
    Kokkos::deep_copy(reference.qkv, ref_in);
    Kokkos::deep_copy(reference.d_o, ref_do);
  }
  auto probed_attention = make_attention<A>(choice, one, "kgpt::probe::");
  probed.run(*probed_attention, exec);
  auto reference_attention = make_attention<float>(other, one, "kgpt::probe::");
  reference.run(*reference_attention, exec);
  result.max_difference = std::max(difference(host_values(probed.o), host_values(reference.o)),
                                   difference(host_values(probed.d_qkv), host_values(reference.d_qkv)));
  // bf16 inputs and outputs, P and dS rounded to bf16 (cuDNN): a few bf16 roundings of each value's
  // scale; fp32 implementations differ by summation order only.
  result.tolerance = std::is_same<A, bf16>::value ? 2e-2 : 1e-4;
  if (!(result.max_difference <= result.tolerance)) {
    throw Error(ExitCode::failure, "attention " + result.attention + " at " + std::to_string(seq) +
                                       " tokens differs from " + result.compared_with + " by " +
                                       text::significant(result.max_difference) + " (allowed " +
                                       text::significant(result.tolerance) + ")");
  }
  return result;
}

}  // namespace

AttentionProbe probe_attention(const config::ModelConfig& model, int batch, int seq) {
  if (model.precision == config::Precision::bf16) return probe<bf16>(model, batch, seq);
  return probe<float>(model, batch, seq);
}

}  // namespace kgpt::probes
