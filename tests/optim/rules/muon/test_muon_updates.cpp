// Muon's kernels against the plain iteration and the definitions written out (rules/muon/).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/random.hpp"
#include "optim/rules/muon/updates.hpp"

using namespace kgpt;

namespace {

using HostMatrix = std::vector<std::vector<double>>;

HostMatrix multiply(const HostMatrix& a, const HostMatrix& b, bool transpose_b = false) {
  const std::size_t n = a.size(), k = a[0].size(), m = transpose_b ? b.size() : b[0].size();
  HostMatrix c(n, std::vector<double>(m, 0.0));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t p = 0; p < k; ++p) c[i][j] += a[i][p] * (transpose_b ? b[j][p] : b[p][j]);
  return c;
}

// The iteration written out plainly on the host, in double.
HostMatrix reference_newton_schulz(HostMatrix g, int steps) {
  const bool transposed = g.size() > g[0].size();
  if (transposed) {
    HostMatrix t(g[0].size(), std::vector<double>(g.size()));
    for (std::size_t i = 0; i < g.size(); ++i)
      for (std::size_t j = 0; j < g[0].size(); ++j) t[j][i] = g[i][j];
    g = t;
  }
  double norm = 0;
  for (auto& row : g)
    for (double v : row) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  for (auto& row : g)
    for (double& v : row) v /= norm;
  for (int s = 0; s < steps; ++s) {
    const HostMatrix a = multiply(g, g, true);
    const HostMatrix aa = multiply(a, a);
    HostMatrix b = a;
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::size_t j = 0; j < a.size(); ++j) b[i][j] = -4.7750 * a[i][j] + 2.0315 * aa[i][j];
    const HostMatrix bx = multiply(b, g);
    for (std::size_t i = 0; i < g.size(); ++i)
      for (std::size_t j = 0; j < g[0].size(); ++j) g[i][j] = 3.4445 * g[i][j] + bx[i][j];
  }
  if (!transposed) return g;
  HostMatrix t(g[0].size(), std::vector<double>(g.size()));
  for (std::size_t i = 0; i < g.size(); ++i)
    for (std::size_t j = 0; j < g[0].size(); ++j) t[j][i] = g[i][j];
  return t;
}

HostMatrix to_host(const Matrix<double>& m) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  HostMatrix out(m.extent(0), std::vector<double>(m.extent(1)));
  for (std::size_t i = 0; i < m.extent(0); ++i)
    for (std::size_t j = 0; j < m.extent(1); ++j) out[i][j] = h(i, j);
  return out;
}

}  // namespace

TEST_CASE("Newton-Schulz gives near-orthogonal output equal to the plain iteration", "[optim][muon]") {
  for (auto shape : {std::pair<int, int>{16, 16}, {8, 24}, {24, 8}}) {
    INFO(shape.first << "x" << shape.second);
    Matrix<double> g("g", shape.first, shape.second), out("out", shape.first, shape.second);
    random::fill_normal(g, 200, shape.first, 1.0);
    optim::NewtonSchulzWorkspace<double> work(g.span(), 24);
    optim::newton_schulz<double>(ExecSpace(), g, out, 5, work);
    const HostMatrix result = to_host(out), expected = reference_newton_schulz(to_host(g), 5);
    for (std::size_t i = 0; i < result.size(); ++i)
      for (std::size_t j = 0; j < result[0].size(); ++j) REQUIRE(result[i][j] == Approx(expected[i][j]).margin(1e-10));
    // X X^T (wide) or X^T X (tall) is close to the identity: singular values near 1.
    HostMatrix gram = shape.first <= shape.second ? multiply(result, result, true) : HostMatrix();
    if (gram.empty()) {
      HostMatrix t(result[0].size(), std::vector<double>(result.size()));
      for (std::size_t i = 0; i < result.size(); ++i)
        for (std::size_t j = 0; j < result[0].size(); ++j) t[j][i] = result[i][j];
      gram = multiply(t, t, true);
    }
    for (std::size_t i = 0; i < gram.size(); ++i) {
      CHECK(gram[i][i] > 0.45);
      CHECK(gram[i][i] < 1.45);
      for (std::size_t j = 0; j < gram.size(); ++j) {
        if (i != j) CHECK(std::abs(gram[i][j]) < 0.35);
      }
    }
  }
}

TEST_CASE("one Muon step: momentum, Nesterov, orthogonalisation and the shape scale", "[optim][muon]") {
  // p (3x2): rows > cols, so the step is scaled by sqrt(3/2).
  Matrix<double> p("p", 3, 2), g("g", 3, 2), momentum("momentum", 3, 2), update("update", 3, 2);
  auto hp = Kokkos::create_mirror_view(p);
  auto hg = Kokkos::create_mirror_view(g);
  auto hm = Kokkos::create_mirror_view(momentum);
  const double p0[3][2] = {{1, 2}, {3, 4}, {5, 6}}, g0[3][2] = {{0.5, -1}, {2, 0.25}, {-0.75, 1.5}};
  const double m0[3][2] = {{0.1, 0.2}, {0.0, -0.3}, {0.4, 0.0}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) hp(i, j) = p0[i][j], hg(i, j) = g0[i][j], hm(i, j) = m0[i][j];
  Kokkos::deep_copy(p, hp);
  Kokkos::deep_copy(g, hg);
  Kokkos::deep_copy(momentum, hm);
  optim::NewtonSchulzWorkspace<double> work(6, 2);
  const double lr = 0.04, mu = 0.9;
  optim::muon_update<double>(ExecSpace(), p, g, momentum, update, lr, mu, 0.0, 5, work);

  // By hand: buf = 0.9 m0 + g0; u = g0 + 0.9 buf; then the reference iteration and the update.
  HostMatrix u(3, std::vector<double>(2)), buf(3, std::vector<double>(2));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      buf[i][j] = mu * m0[i][j] + g0[i][j];
      u[i][j] = g0[i][j] + mu * buf[i][j];
    }
  const HostMatrix o = reference_newton_schulz(u, 5);
  Kokkos::deep_copy(hp, p);
  Kokkos::deep_copy(hm, momentum);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      CHECK(hm(i, j) == Approx(buf[i][j]).epsilon(1e-14));
      CHECK(hp(i, j) == Approx(p0[i][j] - lr * std::sqrt(1.5) * o[i][j]).epsilon(1e-12));
    }
  CHECK(buf[0][0] == Approx(0.59));  // 0.9 * 0.1 + 0.5
}

TEST_CASE("Muon momentum warms up linearly", "[optim][muon]") {
  CHECK(optim::muon_momentum_at(0, 0.85, 0.95, 500) == 0.85);
  CHECK(optim::muon_momentum_at(250, 0.85, 0.95, 500) == Approx(0.90));
  CHECK(optim::muon_momentum_at(500, 0.85, 0.95, 500) == 0.95);
  CHECK(optim::muon_momentum_at(1000, 0.85, 0.95, 500) == 0.95);
  CHECK(optim::muon_momentum_at(3, 0.85, 0.95, 0) == 0.95);
}

TEST_CASE("Newton-Schulz of a batch: each matrix as alone, its norm summed in parts or whole", "[optim][muon]") {
  // Three 24 x 8 matrices together (transposed to 8 x 24), against each one alone with the plain
  // iteration; the norms in parts of 7 elements (as a GPU sums them, in parts of 16,384) and whole.
  const std::size_t count = 3, rows = 24, cols = 8, size = rows * cols;
  Vector<double> g("g", count * size);
  random::fill_normal(g, 201, 0, 1.0);
  const std::vector<double> host = [&] {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
    return std::vector<double>(h.data(), h.data() + h.size());
  }();
  for (const std::size_t part : {std::size_t(0), std::size_t(7)}) {
    INFO("norm parts of " << part << " elements (0: whole)");
    optim::NewtonSchulzWorkspace<double> work(count * size, count * cols * cols, count, part);
    const auto o = optim::newton_schulz_batch<double, double>(ExecSpace(), g.data(), rows, cols, count, 5, work);
    REQUIRE(o.transposed);
    for (std::size_t k = 0; k < count; ++k) {
      HostMatrix alone(rows, std::vector<double>(cols));
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) alone[i][j] = host[k * size + i * cols + j];
      const HostMatrix expected = reference_newton_schulz(alone, 5);
      const HostMatrix got = to_host(o.item(k));  // (cols, rows): the transpose
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) REQUIRE(got[j][i] == Approx(expected[i][j]).margin(1e-10));
    }
  }
}
