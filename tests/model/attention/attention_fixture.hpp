#pragma once
// Token-major activations for the attention tests, laid out as the models lay them out: a tensor's
// heads are a block of columns of a (B*T, width) matrix, with other columns before and after them,
// so every kernel reads and writes through strides and must leave the other columns alone.

#include <cstdint>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "core/views.hpp"
#include "model/attention/heads.hpp"

namespace kgpt::test {

struct AttentionShape {
  int b, h, kv, t, d;
};

template <class T>
struct TokenHeads {
  Matrix<T> m;
  int b, t, h, d, offset;

  // `pad` columns follow the heads (3 by default, so rows start at odd offsets; cuDNN needs the
  // row stride to be a multiple of 8 elements).
  TokenHeads(const std::string& label, int batch, int seq, int heads, int dim, int pad = 3)
      : m(label, batch * seq, dim + heads * dim + pad), b(batch), t(seq), h(heads), d(dim), offset(dim) {}

  model::Heads<T> view() const { return model::heads_of(m, offset, b, h, d); }
  model::Heads<const T> in() const { return model::heads_of(ConstMatrix<T>(m), offset, b, h, d); }
  std::size_t column(int head, int x) const { return static_cast<std::size_t>(offset + head * d + x); }
  std::size_t row(int batch, int step) const { return static_cast<std::size_t>(batch * t + step); }
};

// q (B, H, T, D), k and v (B, KV, T, D), random from `seed`.
template <class T>
struct AttentionInputs {
  TokenHeads<T> q, k, v;
  AttentionInputs(const AttentionShape& s, std::uint64_t seed)
      : q("q", s.b, s.t, s.h, s.d), k("k", s.b, s.t, s.kv, s.d), v("v", s.b, s.t, s.kv, s.d) {
    random::fill_normal(q.m, seed, 0, 1.0);
    random::fill_normal(k.m, seed, 1, 1.0);
    random::fill_normal(v.m, seed, 2, 1.0);
  }
};

// Naive causal GQA attention on the host, in double, as (B, H, T, D) values in that order.
template <class T>
std::vector<double> reference_attention(const AttentionInputs<T>& in) {
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.q.m);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.k.m);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.v.m);
  const int b = in.q.b, h = in.q.h, t = in.q.t, d = in.q.d, group = in.q.h / in.k.h;
  std::vector<double> out(static_cast<std::size_t>(b) * h * t * d);
  for (int i = 0; i < b; ++i)
    for (int j = 0; j < h; ++j)
      for (int r = 0; r < t; ++r) {
        std::vector<double> w(r + 1);
        double m = -1e300, sum = 0;
        for (int c = 0; c <= r; ++c) {
          double s = 0;
          for (int l = 0; l < d; ++l) {
            s += double(hq(in.q.row(i, r), in.q.column(j, l))) * double(hk(in.k.row(i, c), in.k.column(j / group, l)));
          }
          w[c] = s / std::sqrt(double(d));
          m = std::max(m, w[c]);
        }
        for (int c = 0; c <= r; ++c) sum += (w[c] = std::exp(w[c] - m));
        for (int l = 0; l < d; ++l) {
          double o = 0;
          for (int c = 0; c <= r; ++c) o += w[c] / sum * double(hv(in.v.row(i, c), in.v.column(j / group, l)));
          out[((static_cast<std::size_t>(i) * h + j) * t + r) * d + l] = o;
        }
      }
  return out;
}

// The heads of a TokenHeads as (B, H, T, D) values in that order, on the host.
template <class T>
std::vector<double> heads_values(const TokenHeads<T>& x) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x.m);
  std::vector<double> out;
  for (int i = 0; i < x.b; ++i)
    for (int j = 0; j < x.h; ++j)
      for (int r = 0; r < x.t; ++r)
        for (int l = 0; l < x.d; ++l) out.push_back(double(host(x.row(i, r), x.column(j, l))));
  return out;
}

// True when every column outside the heads still holds `value` (NaN compares by NaN-ness).
template <class T>
bool other_columns_hold(const TokenHeads<T>& x, double value) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x.m);
  for (std::size_t r = 0; r < x.m.extent(0); ++r) {
    for (std::size_t c = 0; c < x.m.extent(1); ++c) {
      if (c >= x.column(0, 0) && c < x.column(x.h - 1, x.d - 1) + 1) continue;
      const double v = double(host(r, c));
      if (std::isnan(value) ? !std::isnan(v) : v != value) return false;
    }
  }
  return true;
}

// max |a - b| / max(1, |b|) over two lists of values.
inline double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    const double d = std::fabs(a[n] - b[n]) / std::max(1.0, std::fabs(b[n]));
    worst = std::isnan(d) ? 1e300 : std::max(worst, d);
  }
  return worst;
}

}  // namespace kgpt::test
