// Student's t upper tail (kgpt golf-check's p-values) against the distribution's closed forms at 1
// and 2 degrees of freedom and its large-dof limit, the normal; the incomplete beta against its
// closed forms. scipy's figures for other cases: tests/app/test_golf_check.py.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/student_t.hpp"

using kgpt::stats::regularized_incomplete_beta;
using kgpt::stats::student_t_upper_tail;

TEST_CASE("Student's t upper tail matches the closed forms at 1 and 2 degrees of freedom", "[core][stats]") {
  const double pi = std::acos(-1.0);
  for (double t : {-30.0, -3.0, -1.0, -0.2, 0.0, 0.2, 0.7, 1.0, 2.5, 6.0, 40.0}) {
    INFO("t " << t);
    // One degree of freedom: Cauchy, 1/2 - atan(t)/pi; two: 1/2 - t / (2 sqrt(2 + t^2)).
    CHECK(student_t_upper_tail(t, 1.0) == Approx(0.5 - std::atan(t) / pi).epsilon(1e-12).margin(1e-15));
    CHECK(student_t_upper_tail(t, 2.0) == Approx(0.5 - t / (2.0 * std::sqrt(2.0 + t * t))).epsilon(1e-12).margin(1e-15));
    // Symmetric about 0.
    CHECK(student_t_upper_tail(t, 5.0) + student_t_upper_tail(-t, 5.0) == Approx(1.0).epsilon(1e-13));
  }
  // Many degrees of freedom: the normal's tail, erfc(t / sqrt(2)) / 2, to within the gap of order
  // t^4 / (4 dof) relative (2.5e-5 at t = 3).
  for (double t : {0.5, 1.645, 2.326, 3.0}) CHECK(student_t_upper_tail(t, 1e6) == Approx(0.5 * std::erfc(t / std::sqrt(2.0))).epsilon(5e-5));
  CHECK(student_t_upper_tail(0.0, 3.0) == 0.5);
  CHECK(student_t_upper_tail(INFINITY, 3.0) == 0.0);
  CHECK(std::isnan(student_t_upper_tail(1.0, 0.0)));
}

TEST_CASE("the regularized incomplete beta matches its closed forms", "[core][stats]") {
  for (double x : {0.0, 1e-6, 0.1, 0.37, 0.5, 0.81, 0.999, 1.0}) {
    INFO("x " << x);
    CHECK(regularized_incomplete_beta(x, 1.0, 1.0) == Approx(x).margin(1e-14));                          // uniform
    CHECK(regularized_incomplete_beta(x, 2.0, 1.0) == Approx(x * x).margin(1e-14));                      // x^a
    CHECK(regularized_incomplete_beta(x, 1.0, 3.0) == Approx(1.0 - std::pow(1.0 - x, 3.0)).margin(1e-14));
    CHECK(regularized_incomplete_beta(x, 0.5, 0.5) ==
          Approx(2.0 / std::acos(-1.0) * std::asin(std::sqrt(x))).margin(1e-13));  // arcsine
  }
}
