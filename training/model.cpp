#include "training/model.hpp"

#include <cmath>

namespace archipelago::training {
namespace {

torch::nn::Linear linear(int in, int out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

int swiglu_hidden(int d_model) {
  // 8/3·d keeps SwiGLU's parameter count equal to a 4·d GELU MLP; round up to a multiple of 32.
  int hidden = (8 * d_model) / 3;
  return (hidden + 31) / 32 * 32;
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& config) : heads_(config.heads) {
  const int head_dim = config.d_model / config.heads;
  qkv_ = register_module("qkv", linear(config.d_model, 3 * config.d_model));
  proj_ = register_module("proj", linear(config.d_model, config.d_model));
  q_norm_ = register_module("q_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({head_dim})));
  k_norm_ = register_module("k_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({head_dim})));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, torch::Tensor* past_keys,
                                              torch::Tensor* past_values) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2);
  const auto head_dim = C / heads_;
  auto qkv = qkv_->forward(x).view({B, T, 3, heads_, head_dim});  // (B, T, 3, H, D)
  // LayerNorm in fp32: under bf16 autocast qkv is bf16, and LibTorch 1.13's CPU layer_norm does
  // not accept bf16 inputs with fp32 weights.
  auto q = q_norm_->forward(qkv.select(2, 0).to(torch::kFloat)).transpose(1, 2);  // (B, H, T, D)
  auto k = k_norm_->forward(qkv.select(2, 1).to(torch::kFloat)).transpose(1, 2);  // (B, H, T, D)
  auto v = qkv.select(2, 2).transpose(1, 2);                      // (B, H, T, D)
  int64_t past = 0;
  if (past_keys && past_values) {
    if (past_keys->defined()) {
      past = past_keys->size(2);
      k = torch::cat({*past_keys, k}, 2);  // (B, H, past + T, D)
      v = torch::cat({*past_values, v}, 2);
    }
    *past_keys = k;
    *past_values = v;
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));  // (B, H, T, past + T)
  // Query i sits at position past + i: it sees the keys up to there.
  auto future = torch::ones({T, past + T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(past + 1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto attention = torch::softmax(scores, -1);
  auto y = torch::matmul(attention, v).transpose(1, 2).reshape({B, T, C});  // (B, T, C)
  return proj_->forward(y);
}

MlpImpl::MlpImpl(const ModelConfig& config) : swiglu_(config.mlp == "swiglu") {
  const int hidden = swiglu_ ? swiglu_hidden(config.d_model) : 4 * config.d_model;
  up_ = register_module("up", linear(config.d_model, hidden));
  if (swiglu_) gate_ = register_module("gate", linear(config.d_model, hidden));
  down_ = register_module("down", linear(hidden, config.d_model));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  if (swiglu_) return down_->forward(torch::silu(gate_->forward(x)) * up_->forward(x));
  return down_->forward(torch::gelu(up_->forward(x)));
}

BlockImpl::BlockImpl(const ModelConfig& config) {
  attn_norm_ = register_module("attn_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model})));
  attn_ = register_module("attn", CausalSelfAttention(config));
  mlp_norm_ = register_module("mlp_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model})));
  mlp_ = register_module("mlp", Mlp(config));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, torch::Tensor* past_keys, torch::Tensor* past_values) {
  auto h = x + attn_->forward(attn_norm_->forward(x), past_keys, past_values);
  return h + mlp_->forward(mlp_norm_->forward(h));
}

TransformerImpl::TransformerImpl(const ModelConfig& config) : config_(config) {
  token_embedding_ = register_module("token_embedding", torch::nn::Embedding(config.vocab, config.d_model));
  position_embedding_ = register_module("position_embedding", torch::nn::Embedding(config.seq_len, config.d_model));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < config.layers; ++i) blocks_->push_back(Block(config));
  final_norm_ = register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model})));

  // GPT-2 style initialization; residual output projections scaled by 1/sqrt(2L).
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * config.layers);
  for (auto& item : named_parameters()) {
    const auto& name = item.key();
    auto& p = item.value();
    if (p.dim() < 2) continue;  // LayerNorm weights and biases keep their 1 / 0
    const bool residual = name.find("proj.weight") != std::string::npos || name.find("down.weight") != std::string::npos;
    p.normal_(0.0, residual ? residual_std : 0.02);
  }
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  const auto T = tokens.size(1);
  auto positions = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  auto x = token_embedding_->forward(tokens) + position_embedding_->forward(positions);  // (B, T, C)
  for (const auto& block : *blocks_) x = block->as<BlockImpl>()->forward(x);
  x = final_norm_->forward(x);
  return torch::matmul(x, token_embedding_->weight.t());  // (B, T, V), tied weights
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, KvCache& cache) {
  const auto T = tokens.size(1);
  TORCH_CHECK(cache.length + T <= config_.seq_len, "KvCache: ", cache.length + T, " positions, the model has ",
              config_.seq_len);
  cache.keys.resize(blocks_->size());
  cache.values.resize(blocks_->size());
  auto positions = torch::arange(cache.length, cache.length + T,
                                 torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  auto x = token_embedding_->forward(tokens) + position_embedding_->forward(positions);  // (B, T, C)
  for (size_t i = 0; i < blocks_->size(); ++i) {
    x = (*blocks_)[i]->as<BlockImpl>()->forward(x, &cache.keys[i], &cache.values[i]);
  }
  cache.length += T;
  x = final_norm_->forward(x);
  return torch::matmul(x, token_embedding_->weight.t());
}

LossParts language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss) {
  auto flat_logits = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat);  // (B·T, V)
  auto flat_targets = targets.reshape({-1});
  auto cross_entropy = torch::nn::functional::cross_entropy(flat_logits, flat_targets);
  auto log_z = torch::logsumexp(flat_logits, -1);
  return {cross_entropy + z_loss * log_z.pow(2).mean(), cross_entropy};
}

std::vector<ParameterInfo> describe_parameters(torch::nn::Module& model) {
  std::vector<ParameterInfo> out;
  int64_t offset = 0;
  for (const auto& item : model.named_parameters()) {
    ParameterInfo info;
    info.name = item.key();
    info.shape = item.value().sizes().vec();
    info.numel = item.value().numel();
    info.offset = offset;
    offset += info.numel;
    const std::string prefix = "blocks.";
    if (info.name.rfind(prefix, 0) == 0) info.layer = std::stoi(info.name.substr(prefix.size()));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace archipelago::training
