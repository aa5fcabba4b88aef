// The decoder-only transformer language model (LibTorch). Include only where torch is needed:
// the rest of the project talks to a model through `Replica` (replica.hpp), which hides torch.
//
// Shape: token + learned position embeddings → L pre-norm blocks (causal self-attention with
// QK-LayerNorm, then a SwiGLU or GELU MLP) → final LayerNorm → logits through the tied embedding.
#pragma once

#include <torch/torch.h>

#include "training/fragments.hpp"
#include "training/options.hpp"

namespace archipelago::training {

// The keys and values of the positions a sequence has seen, per block: generation feeds one new
// token at a time and attends over these instead of running the whole prefix again.
struct KvCache {
  std::vector<torch::Tensor> keys, values;  // per block: (B, H, T_past, D), undefined while empty
  int64_t length = 0;                       // T_past: the next token's position
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const ModelConfig& config);
  // (B, T, C) -> (B, T, C). With `past_keys`/`past_values` (a KvCache's entries of this block, may be
  // undefined), the T positions follow theirs: they attend to them too and are appended to them.
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* past_keys = nullptr, torch::Tensor* past_values = nullptr);

 private:
  int heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  torch::nn::LayerNorm q_norm_{nullptr}, k_norm_{nullptr};  // over the head dimension
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

 private:
  bool swiglu_;
  torch::nn::Linear gate_{nullptr}, up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* past_keys = nullptr, torch::Tensor* past_values = nullptr);

 private:
  torch::nn::LayerNorm attn_norm_{nullptr}, mlp_norm_{nullptr};
  CausalSelfAttention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& tokens);  // (B, T) int64 -> logits (B, T, V)
  // The logits of `tokens` (B, T) at positions cache.length ... cache.length + T − 1, attending to
  // the cached positions before them; the cache grows by T. cache.length + T ≤ seq_len.
  torch::Tensor forward(const torch::Tensor& tokens, KvCache& cache);

  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm final_norm_{nullptr};
};
TORCH_MODULE(Transformer);

struct LossParts {
  torch::Tensor total;          // cross-entropy + z_loss · mean(logsumexp²): what is minimized
  torch::Tensor cross_entropy;  // what is reported
};
LossParts language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss);

// Parameter names, shapes and block indices in `named_parameters()` order.
std::vector<ParameterInfo> describe_parameters(torch::nn::Module& model);

}  // namespace archipelago::training
