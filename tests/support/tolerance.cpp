#include "tolerance.h"

#include <cmath>
#include <sstream>

#include <torch/torch.h>

namespace fitsum::test {

::testing::AssertionResult tensors_close(const torch::Tensor& got, const torch::Tensor& want, Tolerance tolerance) {
  if (!got.defined() || !want.defined()) {
    return ::testing::AssertionFailure() << (got.defined() ? "the reference" : "the result") << " is undefined";
  }
  if (got.sizes() != want.sizes()) {
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " vs reference " << want.sizes();
  }
  if (want.numel() == 0) return ::testing::AssertionSuccess();
  const auto a = got.detach().cpu().to(torch::kDouble).reshape({-1});
  const auto b = want.detach().cpu().to(torch::kDouble).reshape({-1});
  const double scale = b.abs().max().item<double>();
  const double bound = tolerance.atol + tolerance.rtol * scale;
  const auto difference = (a - b).abs();
  const auto worst = difference.argmax().item<std::int64_t>();
  const double largest = difference[worst].item<double>();
  if (std::isfinite(largest) && largest <= bound) return ::testing::AssertionSuccess();
  std::ostringstream out;
  out << "max |got - want| = " << largest << " at flat index " << worst << " (got " << a[worst].item<double>()
      << ", want " << b[worst].item<double>() << ") exceeds " << bound << " = " << tolerance.atol << " + "
      << tolerance.rtol << " x max|want| " << scale;
  return ::testing::AssertionFailure() << out.str();
}

::testing::AssertionResult values_close(double got, double want, Tolerance tolerance) {
  const double bound = tolerance.atol + tolerance.rtol * std::abs(want);
  const double difference = std::abs(got - want);
  if (std::isfinite(difference) && difference <= bound) return ::testing::AssertionSuccess();
  std::ostringstream out;
  out.precision(10);
  out << "|" << got << " - " << want << "| = " << difference << " exceeds " << bound << " = " << tolerance.atol << " + "
      << tolerance.rtol << " x |want|";
  return ::testing::AssertionFailure() << out.str();
}

}  // namespace fitsum::test
