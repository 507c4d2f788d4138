// The feed-forward activations fitsum's configs name (model::ModelConfig::activation_function), here because the
// feed-forward kernel (kernels/feed_forward.h) computes them and their derivatives.
#pragma once

namespace fitsum::kernels {

enum class Activation { relu, gelu, gelu_new, silu };

}  // namespace fitsum::kernels
