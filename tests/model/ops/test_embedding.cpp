#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/gradcheck.hpp"
#include "model/ops/embedding.hpp"

using namespace kgpt;

namespace {
TokenMatrix tokens_of(const std::vector<std::vector<int>>& rows) {
  TokenMatrix tokens("tokens", rows.size(), rows[0].size());
  auto host = Kokkos::create_mirror_view(tokens);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < rows[i].size(); ++j) host(i, j) = rows[i][j];
  Kokkos::deep_copy(tokens, host);
  return tokens;
}
}  // namespace

TEST_CASE("token embedding gathers rows and scatters gradients, repeated tokens included", "[model][embedding]") {
  const auto tokens = tokens_of({{3, 1, 3}, {0, 3, 2}});
  Matrix<double> table("table", 5, 4), out("out", 6, 4), dtable("dtable", 5, 4);
  random::fill_normal(table, 40, 0, 1.0);
  model::ops::embedding_forward<double>(ExecSpace(), tokens, table, out);
  auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  const int flat[] = {3, 1, 3, 0, 3, 2};
  for (int n = 0; n < 6; ++n)
    for (int c = 0; c < 4; ++c) CHECK(ho(n, c) == ht(flat[n], c));

  const auto w = test::random_like("w", out, 41);
  auto loss = [&] {
    model::ops::embedding_forward<double>(ExecSpace(), tokens, table, out);
    return test::dot(w, out);
  };
  const model::ops::EmbeddingSortSpace<double> space(6, 5, 4);  // what a GPU sorts rows by token in
  model::ops::embedding_backward<double>(ExecSpace(), tokens, w, dtable, space);
  test::check_gradient("embedding dtable", table, dtable, loss);
  auto first = Kokkos::create_mirror(dtable);
  Kokkos::deep_copy(first, dtable);
  CHECK(first(4, 0) == 0.0);  // token 4 never appears
  model::ops::embedding_backward<double>(ExecSpace(), tokens, w, dtable, space);
  auto second = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dtable);
  for (std::size_t i = 0; i < dtable.span(); ++i) CHECK(second.data()[i] == 2 * first.data()[i]);
}

TEST_CASE("token embedding gradient: grouped by token sums each token's rows in segments, in a fixed order",
          "[model][embedding]") {
  // Skewed tokens (three in half the rows, over 32 rows each; some never seen) over several sequences.
  const int batch = 4, seq = 100, c = 7, vocab = 40, n = batch * seq;
  std::vector<std::vector<int>> rows(batch, std::vector<int>(seq));
  std::uint64_t state = 12345;
  for (auto& row : rows) {
    for (int& token : row) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const int draw = static_cast<int>((state >> 33) % 100);
      token = draw < 50 ? draw % 3 : draw % (vocab - 5);  // tokens vocab-5.. never appear
    }
  }
  const auto tokens = tokens_of(rows);
  Matrix<float> dout("dout", n, c), by_channel("by_channel", vocab, c), by_token("by_token", vocab, c);
  random::fill_normal(dout, 60, 0, 1.0);
  random::fill_normal(by_channel, 60, 1, 1.0);  // gradients accumulate onto what is there
  Kokkos::deep_copy(by_token, by_channel);
  auto start = Kokkos::create_mirror(by_channel);  // a copy, also where by_channel is in host memory
  Kokkos::deep_copy(start, by_channel);
  model::ops::embedding_backward_by_channel<float>(ExecSpace(), tokens, dout, by_channel);
  const model::ops::EmbeddingSortSpace<float> space(n, vocab, c);
  model::ops::embedding_backward_by_token<float>(ExecSpace(), tokens, dout, by_token, space);
  auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), by_channel);
  auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), by_token);
  auto hd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dout);

  // The documented order, as plain host loops: each token's rows in order, cut into segments of 32,
  // each summed from zero, the segments' sums added in order, the total added to the table.
  const int segment = model::ops::EmbeddingSortSpace<float>::rows_per_segment;
  int largest = 0, differing = 0;
  for (int v = 0; v < vocab; ++v) {
    std::vector<int> mine;
    for (int i = 0; i < n; ++i) {
      if (rows[i / seq][i % seq] == v) mine.push_back(i);
    }
    largest = std::max<int>(largest, static_cast<int>(mine.size()));
    for (int j = 0; j < c; ++j) {
      float total = 0;
      for (std::size_t first = 0; first < mine.size(); first += segment) {
        float part = 0;
        for (std::size_t r = first; r < std::min(mine.size(), first + segment); ++r) part += hd(mine[r], j);
        total += part;
      }
      const float expected = mine.empty() ? start(v, j) : start(v, j) + total;
      differing += b(v, j) != expected;
      // The host's pass per channel, in another order: equal up to rounding.
      CHECK(b(v, j) == Approx(a(v, j)).epsilon(1e-5).margin(1e-5));
      // And against double, so the orders cannot agree on a wrong answer.
      double exact = start(v, j);
      for (int i : mine) exact += hd(i, j);
      CHECK(b(v, j) == Approx(exact).epsilon(1e-5).margin(1e-5));
    }
  }
  CHECK(largest > 2 * segment);  // some token spans several segments
  CHECK(differing == 0);

  // A workspace made for fewer rows, or a smaller vocabulary, is refused before anything is written.
  auto before = Kokkos::create_mirror(by_token);  // a copy, also in host memory
  Kokkos::deep_copy(before, by_token);
  const model::ops::EmbeddingSortSpace<float> short_rows(n - 1, vocab, c), short_vocab(n, vocab - 1, c);
  for (const auto* small : {&short_rows, &short_vocab}) {
    CHECK_THROWS_WITH(model::ops::embedding_backward_by_token<float>(ExecSpace(), tokens, dout, by_token, *small),
                      Catch::Contains("kgpt::embedding::backward: the sort workspace is smaller than 400 rows of 7 "
                                      "channels over a vocabulary of 40 need"));
  }
  auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), by_token);
  for (std::size_t i = 0; i < after.span(); ++i) CHECK(after.data()[i] == before.data()[i]);
}

TEST_CASE("token and position embedding: one pass adds the rows, gradients sum over the batch", "[model][embedding]") {
  const int batch = 3, seq = 4, c = 5, vocab = 7;
  Matrix<double> wte("wte", vocab, c), wpe("wpe", 6, c), x("x", batch * seq, c), dwpe("dwpe", 6, c), dwte("dwte", vocab, c);
  random::fill_normal(wte, 50, 0, 1.0);
  random::fill_normal(wpe, 50, 1, 1.0);
  const auto tokens = tokens_of({{1, 2, 3, 1}, {0, 6, 6, 2}, {5, 5, 5, 5}});
  const auto w = test::random_like("w", x, 51);
  auto loss = [&] {
    model::ops::embedding_forward<double>(ExecSpace(), tokens, wte, wpe, x);
    return test::dot(w, x);
  };
  loss();
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hte = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), wte);
  auto hpe = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), wpe);
  CHECK(hx(2 * seq + 1, 3) == hte(5, 3) + hpe(1, 3));
  model::ops::position_embedding_backward<double>(ExecSpace(), seq, w, dwpe);
  model::ops::embedding_backward<double>(ExecSpace(), tokens, w, dwte,
                                          model::ops::EmbeddingSortSpace<double>(batch * seq, vocab, c));
  test::check_gradient("position dwpe", wpe, dwpe, loss);
  test::check_gradient("token dwte", wte, dwte, loss);
}

TEST_CASE("embedding gradients from bf16 activations agree with float", "[model][embedding][bf16]") {
  const int batch = 2, seq = 64, c = 16, vocab = 30;
  std::vector<std::vector<int>> rows(batch, std::vector<int>(seq));
  for (int i = 0; i < batch; ++i)
    for (int j = 0; j < seq; ++j) rows[i][j] = (7 * j + 3 * i) % vocab;
  const auto tokens = tokens_of(rows);
  Matrix<float> dout("dout", batch * seq, c), d32("d32", vocab, c), d16("d16", vocab, c);
  random::fill_normal(dout, 61, 0, 1.0);
  Matrix<bf16> dout16("dout16", batch * seq, c);
  auto h32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dout);
  auto h16 = Kokkos::create_mirror_view(dout16);
  for (std::size_t i = 0; i < dout.span(); ++i) h16.data()[i] = bf16(h32.data()[i]);
  Kokkos::deep_copy(dout16, h16);
  const model::ops::EmbeddingSortSpace<float> space(batch * seq, vocab, c);
  model::ops::embedding_backward<float>(ExecSpace(), tokens, dout, d32, space);
  model::ops::embedding_backward<float>(ExecSpace(), tokens, dout16, d16, space);
  auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d32);
  auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d16);
  // Each of the ~4 rows a token sums differs by its rounding to bf16 (2^-8 relative).
  for (std::size_t i = 0; i < d32.span(); ++i) CHECK(std::fabs(b.data()[i] - a.data()[i]) < 2e-2);
}
