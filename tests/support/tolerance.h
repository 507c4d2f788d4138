// Numeric comparisons for every test: a difference is judged against the reference's own magnitude, so that a
// bound holds whichever BLAS kernels a CPU picks (OpenBLAS chooses per CPU; float32 rounding scales with the
// values, not with a fixed absolute number). The tolerances themselves follow ../shared/fixtures/README.md.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <torch/types.h>

namespace fitsum::test {

// |got - want| <= atol + rtol * scale, where scale is the reference's magnitude: |want| for a scalar, max |want|
// over the whole tensor for a tensor (an entry-wise relative bound would be meaningless for entries near zero).
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};
inline Tolerance relative(double rtol) { return {rtol, 0.0}; }
inline Tolerance absolute(double atol) { return {0.0, atol}; }

// Same shape and every entry within the tolerance; the message names the worst entry, its values and the bound.
::testing::AssertionResult tensors_close(const torch::Tensor& got, const torch::Tensor& want, Tolerance tolerance);
::testing::AssertionResult values_close(double got, double want, Tolerance tolerance);

}  // namespace fitsum::test

// EXPECT_CLOSE(got, want, relative(1e-5)) << "what";  works for two tensors or two numbers.
#define EXPECT_CLOSE(got, want, tolerance) EXPECT_TRUE(::fitsum::test::close_dispatch((got), (want), (tolerance)))

namespace fitsum::test {
inline ::testing::AssertionResult close_dispatch(const torch::Tensor& got, const torch::Tensor& want, Tolerance t) {
  return tensors_close(got, want, t);
}
inline ::testing::AssertionResult close_dispatch(double got, double want, Tolerance t) {
  return values_close(got, want, t);
}
}  // namespace fitsum::test
