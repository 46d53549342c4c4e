#pragma once
// golf's path from the q and k projections to attention, as one kernel each way: per head row of
// D features (token n, head h) of q and of k,
//   xn = x r, r = 1 / sqrt(mean(x^2) + eps)                         (RMSNorm over the head)
//   rope: z[i] = xn[i] cos + xn[i + R/2] sin, z[i + R/2] = -xn[i] sin + xn[i + R/2] cos, i < R/2,
//         angle(t, i) = t base^(-2i/R), t = n % T; z[i] = xn[i] for i >= R         (half-split)
//         R: the rotated dimensions, D (the whole head) or model.rope_dims (partial RoPE, as
//         parameter-golf's records rotate the first R of each head and pass the rest through)
//   q: y = gain(h) z;  k: y = z
// Backward, from dy: dz = gain dy (q) or dy (k); dgain(h) += sum z dy (q); dxn = rope^T dz;
//   dx = r dxn - r^3 x mean(dxn x).
// raw: (N, W) activations (the fused QKV projection) holding q in columns [q_offset, q_offset + H D)
// and k in [k_offset, k_offset + KV D); q_out (N, H D), k_out (N, KV D); q_rstd (N H), k_rstd
// (N KV) of T kept for the backward; d_raw receives dq and dk at the same columns as raw (its v
// columns are left alone). cos, sin: (Tmax, D/2) with Tmax >= T, their columns from R/2 on cos 1 and
// sin 0 (rope_tables), so the kernels treat the passed dimensions as pairs rotated by angle 0: slot
// i < R/2 pairs i with i + R/2, slot i >= R/2 pairs i + R/2 with i + D/2. gain, dgain: (H) parameters.
// A head row per thread and its vector lanes over the D/2 rotation pairs, P pairs a lane (PackedRows
// over rows of D/2 elements): 16 bytes of each half per lane on a GPU where the arrays allow it, one
// pair at a time on the host. Each kernel is written once with P a template parameter.

#include <cmath>
#include <type_traits>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"
#include "core/kernel.hpp"

namespace kgpt::model::ops {

// Fills the tables; angles are computed in double, then rounded to T. rotated_pairs: R/2, the pairs
// rotated (0: all D/2); the columns after them hold angle 0.
template <class T>
void rope_tables(const Matrix<T>& cos_table, const Matrix<T>& sin_table, double base, std::size_t rotated_pairs = 0) {
  const std::size_t t_max = cos_table.extent(0), half = cos_table.extent(1);
  const std::size_t rotated = rotated_pairs == 0 ? half : rotated_pairs;
  auto host_cos = Kokkos::create_mirror(cos_table);
  auto host_sin = Kokkos::create_mirror(sin_table);
  for (std::size_t t = 0; t < t_max; ++t) {
    for (std::size_t i = 0; i < half; ++i) {
      const double inv_freq = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(2 * rotated));
      const double angle = i < rotated ? static_cast<double>(t) * inv_freq : 0.0;
      host_cos(t, i) = static_cast<T>(std::cos(angle));
      host_sin(t, i) = static_cast<T>(std::sin(angle));
    }
  }
  Kokkos::deep_copy(cos_table, host_cos);
  Kokkos::deep_copy(sin_table, host_sin);
}

// One head row of q or k, as the kernels walk them: rows [0, N H) are q's (by token, then head), the
// next N KV rows are k's.
struct QkRow {
  bool is_q;
  std::size_t index;  // among q's rows, or among k's
  std::size_t token;
  int head, in_col, out_col;  // the head, its first column in the raw (QKV) matrix and in q_out or k_out
  int t;                      // its position in the sequence
};

struct QkShape {
  int heads = 0, kv_heads = 0, dim = 0, seq = 0, q_offset = 0, k_offset = 0;
  int rotated_pairs = 0;  // R/2, golf's rotated pairs of a head (model.rope_dims / 2); 0: all D/2

  KOKKOS_INLINE_FUNCTION int rotated() const { return rotated_pairs > 0 ? rotated_pairs : dim / 2; }
  // The two features slot i of a head pairs: (i, i + R/2) rotated, or two passed through.
  KOKKOS_INLINE_FUNCTION int first_of(int i) const { return i < rotated() ? i : i + rotated(); }
  KOKKOS_INLINE_FUNCTION int second_of(int i) const { return i < rotated() ? i + rotated() : i + dim / 2; }

  KOKKOS_INLINE_FUNCTION QkRow row(std::size_t row, std::size_t q_rows) const {
    QkRow r;
    r.is_q = row < q_rows;
    r.index = r.is_q ? row : row - q_rows;
    const int head_count = r.is_q ? heads : kv_heads;
    r.token = r.index / head_count;
    r.head = static_cast<int>(r.index % head_count);
    r.in_col = (r.is_q ? q_offset : k_offset) + r.head * dim;
    r.out_col = r.head * dim;
    r.t = static_cast<int>(r.token % seq);
    return r;
  }
};

// RoPE's rotation of a feature pair (x1 from the first half of a head, x2 from the second) by the
// angle with cosine c and sine s, as Hugging Face's Llama rotates (rotate_half):
//   z1 = x1 c - x2 s,  z2 = x2 c + x1 s.
// Its transpose is the rotation by -s; golf's rotation (parameter-golf's) is the one by -s.
template <class T>
KOKKOS_INLINE_FUNCTION void rotate_pair(T x1, T x2, T c, T s, T& z1, T& z2) {
  z1 = x1 * c - x2 * s;
  z2 = x2 * c + x1 * s;
}

namespace {  // kernels: internal linkage, see core/kernel.hpp

// The cos and sin tables as the kernels read them: P angles of position t from pair i on.
template <class T>
struct RopeAngles {
  RowView<const T> cos_t, sin_t;
  RopeAngles(const ConstMatrix<T>& cos_table, const ConstMatrix<T>& sin_table) : cos_t(cos_table), sin_t(sin_table) {}
  template <int P>
  KOKKOS_INLINE_FUNCTION void load(int t, int i, T* c, T* sn) const {
    detail::load_values<P>(&cos_t(t, i), c);
    detail::load_values<P>(&sin_t(t, i), sn);
  }
};

// f(team, head_row) for every head row of q and k of n tokens, a row's lanes over its D / 2P packs of
// rotation pairs (PackedRows over rows of D / 2 elements; at bf16's D = 64 and P = 8, 4 lanes a row
// and 8 rows a warp).
template <int P, class F>
void for_each_head_row(const ExecSpace& exec, const char* label, std::size_t n, const QkShape& s, const F& f) {
  using Rows = PackedRows<P>;
  const std::size_t q_rows = n * s.heads, rows = q_rows + n * s.kv_heads;
  const int half = s.dim / 2, per_team = Rows::rows_per_team(half);
  kgpt::parallel_for(label, Rows::policy(exec, rows, half), KOKKOS_LAMBDA(const Team& team) {
    const std::size_t row = static_cast<std::size_t>(team.league_rank()) * per_team + team.team_rank();
    if (row >= rows) return;
    f(team, s.row(row, q_rows));
  });
}

namespace detail {

// Whether a call's arrays allow P pairs a lane, 16 bytes at a time: raw is the (N, W) QKV matrix (or
// its gradient), a and b the q and k arrays.
template <int P, class Raw, class Out, class T>
bool qk_packs_fit(const QkShape& s, const Raw& raw, const Out& a, const Out& b, const ConstMatrix<T>& cos_table,
                  const ConstMatrix<T>& sin_table) {
  using R = std::remove_const_t<typename Raw::value_type>;
  using O = std::remove_const_t<typename Out::value_type>;
  const auto cols_fit = [](int col, std::size_t bytes) { return static_cast<std::size_t>(col) * bytes % 16 == 0; };
  const int lanes = s.dim / 2 / P;
  return s.dim % (2 * P) == 0 && s.rotated() % P == 0 && cols_fit(s.rotated(), sizeof(R)) &&
         cols_fit(s.rotated(), sizeof(O)) && lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0 && packs_aligned<P>(raw) &&
         packs_aligned<P>(a) && packs_aligned<P>(b) && packs_aligned<P>(cos_table) && packs_aligned<P>(sin_table) &&
         cols_fit(s.q_offset, sizeof(R)) && cols_fit(s.k_offset, sizeof(R)) && cols_fit(s.dim / 2, sizeof(R)) &&
         cols_fit(s.dim / 2, sizeof(O)) && cols_fit(s.dim / 2, sizeof(T));
}

template <int P, class T, class Raw, class Out, class Gain>
void qk_norm_rope_forward_rows(const ExecSpace& exec, const Raw& raw, const QkShape& s, const ConstMatrix<T>& cos_table,
                               const ConstMatrix<T>& sin_table, const Gain& gain, const Out& q_out, const Out& k_out,
                               const Vector<T>& q_rstd, const Vector<T>& k_rstd, T eps) {
  const int half = s.dim / 2, lanes = half / P;
  // Arrays as pointers and leading dimensions: as Views they would not fit a kernel argument.
  const auto in = row_view(raw);
  const RopeAngles<T> angles(cos_table, sin_table);
  const auto q = row_view(q_out);
  const auto k = row_view(k_out);
  const auto* g_in = gain.data();
  T* const q_r = q_rstd.data();
  T* const k_r = k_rstd.data();
  const T dim = T(s.dim);
  for_each_head_row<P>(exec, "kgpt::qk_norm_rope::forward", raw.extent(0), s,
                       KOKKOS_LAMBDA(const Team& team, const QkRow& q_or_k) {
    const std::size_t token = q_or_k.token;
    const int in_col = q_or_k.in_col, out_col = q_or_k.out_col, t = q_or_k.t;
    T sum_sq = 0;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, lanes),
        [&](const int lane, T& acc) {
          T x1[P], x2[P];
          load_values<P>(&in(token, in_col + s.first_of(lane * P)), x1);
          load_values<P>(&in(token, in_col + s.second_of(lane * P)), x2);
          for (int e = 0; e < P; ++e) acc += x1[e] * x1[e] + x2[e] * x2[e];
        },
        sum_sq);
    const T r = T(1) / compat::sqrt(sum_sq / dim + eps);
    const T g = q_or_k.is_q ? T(g_in[q_or_k.head]) : T(1);
    const auto& out = q_or_k.is_q ? q : k;
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, lanes), [&](const int lane) {
      const int i = lane * P;
      T x1[P], x2[P], c[P], sn[P], y1[P], y2[P];
      const int first = s.first_of(i), second = s.second_of(i);
      load_values<P>(&in(token, in_col + first), x1);
      load_values<P>(&in(token, in_col + second), x2);
      angles.template load<P>(t, i, c, sn);
      for (int e = 0; e < P; ++e) {
        T z1, z2;
        rotate_pair(x1[e] * r, x2[e] * r, c[e], -sn[e], z1, z2);
        y1[e] = g * z1;
        y2[e] = g * z2;
      }
      store_values<P>(&out(token, out_col + first), y1);
      store_values<P>(&out(token, out_col + second), y2);
    });
    Kokkos::single(Kokkos::PerThread(team), [&]() {
      if (q_or_k.is_q) q_r[q_or_k.index] = r;
      else k_r[q_or_k.index] = r;
    });
  });
}

template <int P, class T, class Raw, class DOut, class DRaw, class Gain>
void qk_norm_rope_backward_rows(const ExecSpace& exec, const Raw& raw, const QkShape& s,
                                const ConstMatrix<T>& cos_table, const ConstMatrix<T>& sin_table, const Gain& gain,
                                const ConstVector<T>& q_rstd, const ConstVector<T>& k_rstd, const DOut& dq,
                                const DOut& dk, const DRaw& d_raw, const Matrix<T>& gain_rows) {
  const int half = s.dim / 2, lanes = half / P;
  const auto in = row_view(raw);
  const RopeAngles<T> angles(cos_table, sin_table);
  const auto d_q = row_view(dq);
  const auto d_k = row_view(dk);
  const auto d_in = row_view(d_raw);
  const auto gains = row_view(gain_rows);
  const auto* g_in = gain.data();
  const T* const q_r = q_rstd.data();
  const T* const k_r = k_rstd.data();
  const T dim = T(s.dim);
  for_each_head_row<P>(exec, "kgpt::qk_norm_rope::backward", raw.extent(0), s,
                       KOKKOS_LAMBDA(const Team& team, const QkRow& q_or_k) {
    const bool is_q = q_or_k.is_q;
    const std::size_t token = q_or_k.token;
    const int in_col = q_or_k.in_col, out_col = q_or_k.out_col, t = q_or_k.t;
    const T r = is_q ? q_r[q_or_k.index] : k_r[q_or_k.index];
    const T g = is_q ? T(g_in[q_or_k.head]) : T(1);
    const auto& dy = is_q ? d_q : d_k;
    // A lane's x, dy and rotation, read again by each pass.
    const auto load = [&](const int i, T* x1, T* x2, T* dy1, T* dy2, T* c, T* sn) {
      const int first = s.first_of(i), second = s.second_of(i);
      load_values<P>(&in(token, in_col + first), x1);
      load_values<P>(&in(token, in_col + second), x2);
      load_values<P>(&dy(token, out_col + first), dy1);
      load_values<P>(&dy(token, out_col + second), dy2);
      angles.template load<P>(t, i, c, sn);
    };
    // sum z dy (the gain's term, q only) and sum dxn x (the norm's), over the row.
    T gain_term = 0, dot = 0;
    if (is_q) {
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, lanes),
          [&](const int lane, T& acc) {
            T x1[P], x2[P], dy1[P], dy2[P], c[P], sn[P];
            load(lane * P, x1, x2, dy1, dy2, c, sn);
            for (int e = 0; e < P; ++e) {
              T z1, z2;
              rotate_pair(x1[e], x2[e], c[e], -sn[e], z1, z2);
              acc += z1 * r * dy1[e] + z2 * r * dy2[e];
            }
          },
          gain_term);
    }
    // dxn = the transposed rotation of dz = g dy.
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, lanes),
        [&](const int lane, T& acc) {
          T x1[P], x2[P], dy1[P], dy2[P], c[P], sn[P];
          load(lane * P, x1, x2, dy1, dy2, c, sn);
          for (int e = 0; e < P; ++e) {
            T d1, d2;
            rotate_pair(g * dy1[e], g * dy2[e], c[e], sn[e], d1, d2);
            acc += d1 * x1[e] + d2 * x2[e];
          }
        },
        dot);
    const T coefficient = r * r * r * dot / dim;
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, lanes), [&](const int lane) {
      const int i = lane * P;
      T x1[P], x2[P], dy1[P], dy2[P], c[P], sn[P], dx1[P], dx2[P];
      load(i, x1, x2, dy1, dy2, c, sn);
      for (int e = 0; e < P; ++e) {
        T d1, d2;
        rotate_pair(g * dy1[e], g * dy2[e], c[e], sn[e], d1, d2);
        dx1[e] = r * d1 - coefficient * x1[e];
        dx2[e] = r * d2 - coefficient * x2[e];
      }
      store_values<P>(&d_in(token, in_col + s.first_of(i)), dx1);
      store_values<P>(&d_in(token, in_col + s.second_of(i)), dx2);
    });
    Kokkos::single(Kokkos::PerThread(team), [&]() {
      if (is_q) gains(token, q_or_k.head) = gain_term;
    });
  });
}

}  // namespace detail

// Packs: 16-byte packs per lane (a GPU) where every array allows it, else a pair per lane.
template <class T, bool Packs = backend::Traits::packed_elementwise, class Raw, class Out, class Gain>
void qk_norm_rope_forward(const ExecSpace& exec, const Raw& raw, const QkShape& s, const ConstMatrix<T>& cos_table,
                          const ConstMatrix<T>& sin_table, const Gain& gain, const Out& q_out, const Out& k_out,
                          const Vector<T>& q_rstd, const Vector<T>& k_rstd, T eps) {
  constexpr int P = detail::pack_of<Raw, Out>();
  if (Packs && detail::qk_packs_fit<P>(s, raw, q_out, k_out, cos_table, sin_table)) {
    detail::qk_norm_rope_forward_rows<P>(exec, raw, s, cos_table, sin_table, gain, q_out, k_out, q_rstd, k_rstd, eps);
  } else {
    detail::qk_norm_rope_forward_rows<1>(exec, raw, s, cos_table, sin_table, gain, q_out, k_out, q_rstd, k_rstd, eps);
  }
}

// gain_rows: (N, H) scratch of T for the gain's per-row terms; partials: the column sums' workspace.
template <class T, bool Packs = backend::Traits::packed_elementwise, class Raw, class DOut, class DRaw, class Gain,
          class DGain>
void qk_norm_rope_backward(const ExecSpace& exec, const Raw& raw, const QkShape& s, const ConstMatrix<T>& cos_table,
                           const ConstMatrix<T>& sin_table, const Gain& gain, const ConstVector<T>& q_rstd,
                           const ConstVector<T>& k_rstd, const DOut& dq, const DOut& dk, const DRaw& d_raw,
                           const DGain& dgain, const Matrix<T>& gain_rows, const Workspace<T>& partials = {}) {
  constexpr int P = detail::pack_of<Raw, DOut, DRaw>();
  if (Packs && detail::qk_packs_fit<P>(s, raw, dq, dk, cos_table, sin_table) && detail::packs_aligned<P>(d_raw)) {
    detail::qk_norm_rope_backward_rows<P>(exec, raw, s, cos_table, sin_table, gain, q_rstd, k_rstd, dq, dk, d_raw,
                                          gain_rows);
  } else {
    detail::qk_norm_rope_backward_rows<1>(exec, raw, s, cos_table, sin_table, gain, q_rstd, k_rstd, dq, dk, d_raw,
                                          gain_rows);
  }
  const std::size_t n = raw.extent(0);
  ColumnSums<T, 1>::run(
      exec, "kgpt::qk_norm_rope::backward_gain", n, static_cast<std::size_t>(s.heads), partials,
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T* acc) { acc[0] += gain_rows(i, j); },
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) { dgain(j) += sum; });
}

}  // namespace

}  // namespace kgpt::model::ops
