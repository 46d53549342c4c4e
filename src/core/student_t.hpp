#pragma once
// Student's t distribution's upper tail, for the one-sided test of a mean over seeds against a
// baseline figure (kgpt golf-check): P(T > t) for T with `dof` degrees of freedom, from the
// regularized incomplete beta function, P(T > t) = I_x(dof/2, 1/2) / 2 with x = dof / (dof + t^2)
// for t >= 0 (and 1 minus that for t < 0). I_x is its continued fraction (DLMF 8.17.22), evaluated
// by the modified Lentz method.

namespace kgpt::stats {

// I_x(a, b) for a, b > 0 and 0 <= x <= 1.
double regularized_incomplete_beta(double x, double a, double b);

// P(T > t), dof > 0.
double student_t_upper_tail(double t, double dof);

}  // namespace kgpt::stats
