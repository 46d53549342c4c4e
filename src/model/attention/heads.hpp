#pragma once
// Attention's view of activations that stay token-major: query, key, value and output heads are
// column blocks of (N = B*T, width) matrices, the layout the projections write and read, so no
// kernel reorders them. Heads<A> addresses element (b, h, t, d) at
//   data + b * stride_b + h * stride_h + t * stride_t + d
// (the head dimension D contiguous). For head h of a matrix m whose heads start at column offset:
// data = m.data() + offset, stride_b = T * ld, stride_h = D, stride_t = ld.

#include <cstdint>
#include <type_traits>

#include "config/config.hpp"
#include "core/views.hpp"

namespace kgpt::model {

// A model's heads, computed from its deck once: query heads, key/value heads (grouped-query
// attention when fewer), and their dimension d_model / n_head. Token-major activations hold the
// query heads in q_width() columns and the key or value heads in kv_width(); a fused projection
// writes q, k and v side by side, qkv_width() columns.
struct HeadShape {
  int heads = 0, kv_heads = 0, dim = 0;
  std::size_t q_width() const { return static_cast<std::size_t>(heads) * dim; }
  std::size_t kv_width() const { return static_cast<std::size_t>(kv_heads) * dim; }
  std::size_t qkv_width() const { return q_width() + 2 * kv_width(); }
  // Where k's and v's heads start in a QKV matrix (q's at column 0).
  std::size_t k_column() const { return q_width(); }
  std::size_t v_column() const { return q_width() + kv_width(); }
};
inline HeadShape head_shape(const config::ModelConfig& m) { return {m.n_head, m.n_kv_head, m.d_model / m.n_head}; }

template <class A>
struct Heads {
  A* data = nullptr;
  int batch = 0, heads = 0, seq = 0, dim = 0;
  std::int64_t stride_b = 0, stride_h = 0, stride_t = 0;

  KOKKOS_INLINE_FUNCTION A& operator()(int b, int h, int t, int d) const {
    return data[b * stride_b + h * stride_h + t * stride_t + d];
  }
  // Where row t of head (b, h) starts.
  KOKKOS_INLINE_FUNCTION A* row(int b, int h, int t) const { return data + b * stride_b + h * stride_h + t * stride_t; }
  // Read-only view of the same heads; only offered where A is not already const.
  template <class B = A, class = std::enable_if_t<!std::is_const_v<B>>>
  operator Heads<const B>() const {
    return {data, batch, heads, seq, dim, stride_b, stride_h, stride_t};
  }
};

// `heads` heads of dimension `dim` of a token-major (batch * seq, ld) matrix m, from column offset.
template <class A>
Heads<A> heads_of(A* data, std::int64_t ld, int offset, int batch, int seq, int heads, int dim) {
  return Heads<A>{data + offset, batch, heads, seq, dim, seq * ld, dim, ld};
}

template <class View>
Heads<typename View::value_type> heads_of(const View& m, int offset, int batch, int heads, int dim) {
  const int seq = static_cast<int>(m.extent(0)) / batch;
  return heads_of(m.data(), static_cast<std::int64_t>(m.stride(0)), offset, batch, seq, heads, dim);
}

// The arithmetic of causal attention over query heads q, as the profile counts it: the causal half
// of its two products (scores, then values), 2 B H T^2 D in the forward; the backward does 2.5
// times that (it computes the scores again, then four products' halves).
template <class A>
double attention_flops(const Heads<A>& q, bool backward) {
  const double forward = 2.0 * q.batch * q.heads * static_cast<double>(q.seq) * q.seq * q.dim;
  return backward ? 2.5 * forward : forward;
}

}  // namespace kgpt::model
