#pragma once
// Three options of golf's blocks from parameter-golf's records of 2026-03-20/21 (the SP1024 record
// of 2026-03-31 runs all three), each off by default:
//   model.rope_dims   partial RoPE: only the first R dimensions of each q and k head rotate (as two
//                     halves of R/2, angles t base^(-2i/R)); the rest pass through
//                     (ops/qk_norm_rope.hpp, layers/rotary.hpp)
//   model.ln_scale    the blocks' norms (before attention and before the MLP) scaled by
//                     1/sqrt(l + 1), l the layer as run, counted from 0 (ops/rmsnorm.hpp's scale)
//   model.xsa_last_n  exclusive self-attention on the last N layers as run: each head's output y
//                     loses its projection on its own token's normalized value (the head's KV group's
//                     v, after value embeddings are added), y' = y - (y . vn) vn, vn = v / max(|v|, 1e-12)
//   backward, from dy' (per token and KV group, over the group's heads h):
//     dy_h = dy'_h - (dy'_h . vn) vn
//     dvn = -sum_h [(y_h . vn) dy'_h + (dy'_h . vn) y_h]
//     dv = (dvn - (dvn . vn) vn) / |v| where |v| > 1e-12, else dvn / 1e-12 (the clamp's slope)
//   model.attn_gate_width  the attention output gate of the record of 2026-04-16 (and the later
//                     ones' stacks): each head's output, after XSA, times g = 2 sigmoid(z), z = the
//                     first W features of the attention's input h times the head's row of
//                     attn.attn_gate_proj.weight (H, W; from zero, so g starts at 1)
//   backward: dy = g dy';  dz = 2 sigmoid'(z) (dy' . y);  dW += dz h[:W]^T;  dh[:W] += dz W

#include <cmath>

#include "config/config.hpp"
#include "config/module_keys.hpp"
#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/attention/heads.hpp"
#include "model/block_sequence.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::golf {

inline constexpr const char* kRopeDimsKey = "model.rope_dims";
inline constexpr const char* kLnScaleKey = "model.ln_scale";
inline constexpr const char* kXsaLastKey = "model.xsa_last_n";
inline constexpr int kXsaMaxGroup = 32;  // query heads a KV head serves, at most, under XSA
inline constexpr const char* kAttnGateWidthKey = "model.attn_gate_width";

// The attention output gate's input width (0: no gate).
inline int attn_gate_width(const config::ModelConfig& m) {
  return static_cast<int>(config::module_integer(m.family_keys, kAttnGateWidthKey));
}

// The dimensions of a head that rotate (0: all of them).
inline int rope_dims(const config::ModelConfig& m) {
  return static_cast<int>(config::module_integer(m.family_keys, kRopeDimsKey));
}
// The factor of layer l's two norms: 1/sqrt(l + 1) with model.ln_scale, else 1.
inline double ln_scale(const config::ModelConfig& m, int l) {
  return config::module_boolean(m.family_keys, kLnScaleKey) ? 1.0 / std::sqrt(static_cast<double>(l + 1)) : 1.0;
}
// Whether layer l (as run) subtracts its outputs' projections on their own values.
inline bool exclusive_attention(const config::ModelConfig& m, int l) {
  return l >= run_layers(m) - static_cast<int>(config::module_integer(m.family_keys, kXsaLastKey));
}
inline bool any_exclusive_attention(const config::ModelConfig& m) {
  return config::module_integer(m.family_keys, kXsaLastKey) > 0;
}

namespace {  // kernels: internal linkage, see core/kernel.hpp

constexpr double kXsaNormFloor = 1e-12;  // F.normalize's eps

// |v| of a token's value row of d features, summed in T.
template <class T, class A>
KOKKOS_INLINE_FUNCTION T value_norm(const A* v, int d) {
  T norm_sq = 0;
  for (int i = 0; i < d; ++i) norm_sq += T(v[i]) * T(v[i]);
  return compat::sqrt(norm_sq);
}

// y' = y - (y . vn) vn for every query head, a thread per token and KV group. y, out: (N, H D)
// (out may not be y); qkv: (N, W) with v's columns from v_column.
template <class T, class A>
void exclusive_attention_forward(const ExecSpace& exec, const HeadShape& heads, const ConstMatrix<A>& y,
                                 const ConstMatrix<A>& qkv, const Matrix<A>& out) {
  const RowView<const A> in(y), values(qkv);
  const RowView<A> result(out);
  const int d = static_cast<int>(heads.dim), kv = static_cast<int>(heads.kv_heads);
  const int group = static_cast<int>(heads.heads / heads.kv_heads), v_column = static_cast<int>(heads.v_column());
  const std::size_t rows = y.extent(0) * static_cast<std::size_t>(kv);
  ops::flat_for(exec, "kgpt::golf::xsa::forward", rows, KOKKOS_LAMBDA(const std::size_t row) {
    const std::size_t token = row / static_cast<std::size_t>(kv);
    const int g = static_cast<int>(row % static_cast<std::size_t>(kv));
    const A* v = &values(token, v_column + g * d);
    const T inv = T(1) / compat::max(value_norm<T>(v, d), T(kXsaNormFloor));
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const A* yh = &in(token, h * d);
      T dot = 0;
      for (int i = 0; i < d; ++i) dot += T(yh[i]) * (T(v[i]) * inv);
      A* o = &result(token, h * d);
      for (int i = 0; i < d; ++i) o[i] = store<A>(T(yh[i]) - dot * (T(v[i]) * inv));
    }
  });
}

// From dy' in d_out (overwritten with dy, the gradient of the attention's output y) and y, qkv as
// the forward read them: dv into d_v (N, KV D), for the caller to add to v's gradient. Sums stay in
// T; a KV group holds at most kXsaMaxGroup query heads (the family's check).
template <class T, class A>
void exclusive_attention_backward(const ExecSpace& exec, const HeadShape& heads, const ConstMatrix<A>& y,
                                  const ConstMatrix<A>& qkv, const Matrix<A>& d_out, const Matrix<A>& d_v) {
  const RowView<const A> in(y), values(qkv);
  const RowView<A> grad(d_out), dv_out(d_v);
  const int d = static_cast<int>(heads.dim), kv = static_cast<int>(heads.kv_heads);
  const int group = static_cast<int>(heads.heads / heads.kv_heads), v_column = static_cast<int>(heads.v_column());
  const std::size_t rows = y.extent(0) * static_cast<std::size_t>(kv);
  ops::flat_for(exec, "kgpt::golf::xsa::backward", rows, KOKKOS_LAMBDA(const std::size_t row) {
    const std::size_t token = row / static_cast<std::size_t>(kv);
    const int g = static_cast<int>(row % static_cast<std::size_t>(kv));
    const A* v = &values(token, v_column + g * d);
    const T norm = value_norm<T>(v, d);
    const bool clamped = !(norm > T(kXsaNormFloor));
    const T inv = T(1) / (clamped ? T(kXsaNormFloor) : norm);
    // Each head's y . vn and dy' . vn.
    T y_dots[kXsaMaxGroup], d_dots[kXsaMaxGroup];
    for (int j = 0; j < group; ++j) {
      const A* yh = &in(token, (g * group + j) * d);
      const A* dh = &grad(token, (g * group + j) * d);
      T y_dot = 0, d_dot = 0;
      for (int i = 0; i < d; ++i) {
        y_dot += T(yh[i]) * (T(v[i]) * inv);
        d_dot += T(dh[i]) * (T(v[i]) * inv);
      }
      y_dots[j] = y_dot;
      d_dots[j] = d_dot;
    }
    const auto dvn = [&](const int i) {
      T sum = 0;
      for (int j = 0; j < group; ++j) {
        sum -= y_dots[j] * T(grad(token, (g * group + j) * d + i)) + d_dots[j] * T(in(token, (g * group + j) * d + i));
      }
      return sum;
    };
    T dvn_dot_vn = 0;
    if (!clamped) {
      for (int i = 0; i < d; ++i) dvn_dot_vn += dvn(i) * (T(v[i]) * inv);
    }
    A* dv = &dv_out(token, g * d);
    for (int i = 0; i < d; ++i) dv[i] = store<A>((dvn(i) - dvn_dot_vn * (T(v[i]) * inv)) * inv);
    for (int j = 0; j < group; ++j) {
      A* dh = &grad(token, (g * group + j) * d);
      for (int i = 0; i < d; ++i) dh[i] = store<A>(T(dh[i]) - d_dots[j] * (T(v[i]) * inv));
    }
  });
}

// The gate's logit of head h at row n: the first `width` features of h_in times W's row h.
template <class T, class A, class W>
KOKKOS_INLINE_FUNCTION T gate_logit(const RowView<const A>& h_in, const W* weight, std::size_t n, int h, int width) {
  T z = 0;
  for (int j = 0; j < width; ++j) z += T(h_in(n, j)) * T(weight[h * width + j]);
  return z;
}

// out = y times each head's 2 sigmoid(z), a thread per token and head. y, out: (N, H D); h_in: the
// attention's input (N, C); weight: (H, width) parameters.
template <class T, class A, class W>
void attention_gate_forward(const ExecSpace& exec, const HeadShape& heads, int width, const ConstMatrix<A>& h_in,
                            const W& weight, const ConstMatrix<A>& y, const Matrix<A>& out) {
  const RowView<const A> in(h_in), values(y);
  const RowView<A> result(out);
  const auto* w = weight.data();
  const int d = static_cast<int>(heads.dim), count = static_cast<int>(heads.heads);
  ops::flat_for(exec, "kgpt::golf::attn_gate::forward", y.extent(0) * static_cast<std::size_t>(count),
                KOKKOS_LAMBDA(const std::size_t row) {
                  const std::size_t n = row / static_cast<std::size_t>(count);
                  const int h = static_cast<int>(row % static_cast<std::size_t>(count));
                  const T g = T(2) / (T(1) + compat::exp(-gate_logit<T>(in, w, n, h, width)));
                  for (int i = 0; i < d; ++i) result(n, h * d + i) = store<A>(T(values(n, h * d + i)) * g);
                });
}

// From dy' in d_out (overwritten with dy, the gradient of y): dz into dz_rows (N, H) of T, the
// input's share into d_in (N, width) (for the caller to add to h's gradient), and dW += the column
// sums of dz h[:width], in a fixed order.
template <class T, class A, class W, class DW>
void attention_gate_backward(const ExecSpace& exec, const HeadShape& heads, int width, const ConstMatrix<A>& h_in,
                             const W& weight, const ConstMatrix<A>& y, const Matrix<A>& d_out, const Matrix<T>& dz_rows,
                             const Matrix<A>& d_in, const DW& dweight, const Workspace<T>& partials) {
  const RowView<const A> in(h_in), values(y);
  const RowView<A> grad(d_out), d_input(d_in);
  const RowView<T> dz(dz_rows);
  const auto* w = weight.data();
  const int d = static_cast<int>(heads.dim), count = static_cast<int>(heads.heads);
  const std::size_t n_rows = y.extent(0);
  ops::flat_for(exec, "kgpt::golf::attn_gate::backward", n_rows * static_cast<std::size_t>(count),
                KOKKOS_LAMBDA(const std::size_t row) {
                  const std::size_t n = row / static_cast<std::size_t>(count);
                  const int h = static_cast<int>(row % static_cast<std::size_t>(count));
                  const T s = T(1) / (T(1) + compat::exp(-gate_logit<T>(in, w, n, h, width)));
                  T dot = 0;
                  for (int i = 0; i < d; ++i) dot += T(grad(n, h * d + i)) * T(values(n, h * d + i));
                  dz(n, h) = T(2) * s * (T(1) - s) * dot;
                  for (int i = 0; i < d; ++i) grad(n, h * d + i) = store<A>(T(grad(n, h * d + i)) * (T(2) * s));
                });
  ops::flat_for(exec, "kgpt::golf::attn_gate::backward_input", n_rows, KOKKOS_LAMBDA(const std::size_t n) {
    for (int j = 0; j < width; ++j) {
      T sum = 0;
      for (int h = 0; h < count; ++h) sum += dz(n, h) * T(w[h * width + j]);
      d_input(n, j) = store<A>(sum);
    }
  });
  ops::ColumnSums<T, 1>::run(
      exec, "kgpt::golf::attn_gate::backward_weight", n_rows, static_cast<std::size_t>(count * width), partials,
      KOKKOS_LAMBDA(const std::size_t n, const std::size_t col, T* acc) {
        acc[0] += dz(n, static_cast<int>(col) / width) * T(in(n, static_cast<int>(col) % width));
      },
      KOKKOS_LAMBDA(const int, const std::size_t col, const T sum) { dweight.data()[col] += sum; });
}

}  // namespace

}  // namespace kgpt::model::golf
