// Implements include/fitsum/kernels/tied_embedding.h with a custom autograd Function whose backward writes into the
// table's gradient buffer and returns no gradient for the table itself.
#include "fitsum/kernels/tied_embedding.h"

#include <torch/torch.h>

namespace fitsum::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class EmbeddingLookup : public torch::autograd::Function<EmbeddingLookup> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            std::int64_t padding_idx) {
    ctx->save_for_backward({weight, ids});
    ctx->saved_data["padding_idx"] = padding_idx;
    return at::embedding(weight, ids, padding_idx);  // (..., D)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& weight = saved[0];
    const auto& ids = saved[1];
    const auto padding_idx = ctx->saved_data["padding_idx"].toInt();
    if (grad_outputs[0].defined()) {
      auto rows = ids.reshape({-1});                              // (N)
      auto grad = grad_outputs[0].reshape({-1, weight.size(1)});  // (N, D)
      if (padding_idx >= 0) {
        // Positions holding the padding id contribute nothing (HF: nn.Embedding(padding_idx=pad)): their rows add
        // an exact zero into the padding row, whose gradient stays zero. Selecting only the other positions would
        // need their count on the host (nonzero), which on CUDA waits for the device in every backward.
        grad = torch::where(rows.ne(padding_idx).unsqueeze(1), grad, torch::zeros({}, grad.options()));
      }
      gradient_buffer(weight).index_add_(0, rows, grad.to(weight.scalar_type()));
    }
    return {at::Tensor(), at::Tensor(), at::Tensor()};  // the table's gradient went into its .grad
  }
};

}  // namespace

bool accumulates_in_place(const at::Tensor& weight) {
  return torch::GradMode::is_enabled() && weight.requires_grad() && weight.is_leaf();
}

at::Tensor& gradient_buffer(const at::Tensor& weight) {
  auto& grad = const_cast<at::Tensor&>(weight).mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(weight, at::MemoryFormat::Contiguous);
  return grad;
}

at::Tensor embedding_lookup(const at::Tensor& weight, const at::Tensor& ids, std::int64_t padding_idx) {
  if (!accumulates_in_place(weight)) return torch::embedding(weight, ids, padding_idx);
  return EmbeddingLookup::apply(weight, ids, padding_idx);
}

}  // namespace fitsum::kernels
