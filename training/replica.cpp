#include "training/replica.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include <ATen/autocast_mode.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <dlfcn.h>
#endif

#include "training/model.hpp"

namespace archipelago::training {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Autocast is thread-local state in LibTorch: enable it around one forward pass only.
class AutocastScope {
 public:
  AutocastScope(bool enabled, const torch::Device& device) : enabled_(enabled), cuda_(device.is_cuda()) {
    if (!enabled_) return;
    if (cuda_) {
      at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
      at::autocast::set_enabled(true);
    } else {
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      at::autocast::set_cpu_enabled(true);
    }
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (cuda_) at::autocast::set_enabled(false); else at::autocast::set_cpu_enabled(false);
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
  bool cuda_;
};

// AVX512-BF16 or AMX-BF16, from CPUID leaf 7 (sub-leaf 1: EAX bit 5; sub-leaf 0: EDX bit 22).
bool cpu_has_bf16_matmul() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1u;
  if (a < 1 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return amx_bf16;
  return amx_bf16 || ((a >> 5) & 1u);
#else
  return false;
#endif
}

std::mutex creation_mutex;  // model initialization draws from torch's global generator

}  // namespace

double scheduled_learning_rate(const InnerOptions& options, int64_t step, double budget_spent) {
  if (options.warmup_steps > 0 && step < options.warmup_steps) {
    return options.lr * static_cast<double>(step + 1) / options.warmup_steps;
  }
  double progress = budget_spent;
  if (options.total_steps > 0) {
    if (options.total_steps <= options.warmup_steps) return options.lr;
    progress = static_cast<double>(step - options.warmup_steps) /
               static_cast<double>(options.total_steps - options.warmup_steps);
  } else if (budget_spent < 0) {
    return options.lr;
  }
  progress = std::min(1.0, std::max(0.0, progress));
  const double cosine = 0.5 * (1.0 + std::cos(kPi * progress));
  return options.lr * (options.min_lr_fraction + (1.0 - options.min_lr_fraction) * cosine);
}

struct Replica::Impl {
  ModelConfig model_config;
  InnerOptions inner;
  torch::Device device{torch::kCPU};
  Transformer model{nullptr};
  torch::Tensor flat;  // every parameter is a view into this
  std::vector<ParameterInfo> parameters;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  int64_t steps = 0;
  double budget_spent = -1;  // set_budget_spent

  std::pair<torch::Tensor, torch::Tensor> to_tensors(const Batch& batch) const {
    auto tokens = torch::from_blob(const_cast<Token*>(batch.tokens.data()),
                                   {batch.batch_size, batch.seq_len + 1}, torch::kInt)
                      .to(device, torch::kLong);                         // (B, T+1)
    return {tokens.narrow(1, 0, batch.seq_len), tokens.narrow(1, 1, batch.seq_len)};  // (B, T) each
  }

  // Forward + backward of one batch, loss scaled by `scale`; gradients accumulate.
  LossParts accumulate(const Batch& batch, double scale) {
    auto [inputs, targets] = to_tensors(batch);
    LossParts parts;
    {
      AutocastScope autocast(inner.precision == "bf16", device);
      auto logits = model->forward(inputs);
      parts = language_model_loss(logits, targets, model_config.z_loss);
    }
    (parts.total * scale).backward();
    return parts;
  }

  StepStats finish_step(double loss, double cross_entropy, int64_t tokens) {
    StepStats stats;
    stats.loss = loss;
    stats.cross_entropy = cross_entropy;
    stats.tokens = tokens;
    stats.grad_norm = torch::nn::utils::clip_grad_norm_(model->parameters(), inner.clip_norm);
    stats.lr = scheduled_learning_rate(inner, steps, budget_spent);
    for (auto& group : optimizer->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(stats.lr);
    }
    optimizer->step();
    ++steps;
    return stats;
  }
};

std::string resolve_precision(const std::string& precision, const std::string& device) {
  if (precision != "auto") return precision;
  const bool cpu = device.rfind("cuda", 0) != 0;
  return cpu && cpu_has_bf16_matmul() ? "bf16" : "fp32";
}

Replica::Replica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Replica::~Replica() = default;

Expected<std::unique_ptr<Replica>> Replica::create(const ModelConfig& model, const InnerOptions& inner,
                                                   const std::string& device, uint64_t seed) {
  if (model.d_model % model.heads != 0) {
    return make_error(ErrorCode::invalid_argument, "model: d_model must be divisible by heads");
  }
  auto impl = std::make_unique<Impl>();
  impl->model_config = model;
  impl->inner = inner;
  impl->inner.precision = resolve_precision(inner.precision, device);
  try {
    impl->device = torch::Device(device);
  } catch (const std::exception&) {
    return make_error(ErrorCode::invalid_argument, "train.device: '" + device + "' is not a device (cpu, cuda, cuda:N)");
  }
  if (impl->device.is_cuda() && !torch::cuda::is_available()) {
    return make_error(ErrorCode::unavailable, "train.device = '" + device + "' but this LibTorch sees no CUDA device");
  }
  {
    std::lock_guard<std::mutex> lock(creation_mutex);
    torch::manual_seed(seed);
    impl->model = Transformer(model);
  }
  impl->model->to(impl->device);
  impl->parameters = describe_parameters(*impl->model);

  // Move every parameter into one contiguous buffer and make it a view of that buffer.
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  for (const auto& p : impl->parameters) total += p.numel;
  impl->flat = torch::empty({total}, torch::TensorOptions().dtype(torch::kFloat).device(impl->device));
  size_t index = 0;
  std::vector<torch::Tensor> decayed, undecayed;
  for (auto& p : impl->model->parameters()) {
    const auto& info = impl->parameters[index++];
    auto view = impl->flat.narrow(0, info.offset, info.numel);
    view.copy_(p.detach().reshape({-1}));
    p.set_data(view.view(p.sizes()));
    (p.dim() >= 2 ? decayed : undecayed).push_back(p);
  }
  auto options = torch::optim::AdamWOptions(inner.lr)
                     .betas({inner.beta1, inner.beta2})
                     .eps(inner.eps)
                     .weight_decay(inner.weight_decay);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(options));
  auto no_decay = options;
  no_decay.weight_decay(0.0);
  groups.emplace_back(undecayed, std::make_unique<torch::optim::AdamWOptions>(no_decay));
  impl->optimizer = std::make_unique<torch::optim::AdamW>(std::move(groups), options);
  return std::unique_ptr<Replica>(new Replica(std::move(impl)));
}

StepStats Replica::step(const Batch& batch) { return step_averaged({batch}); }

StepStats Replica::step_averaged(const std::vector<Batch>& batches) {
  impl_->model->train();
  impl_->optimizer->zero_grad();
  double loss = 0, cross_entropy = 0;
  int64_t tokens = 0;
  const double scale = 1.0 / static_cast<double>(batches.size());
  for (const auto& batch : batches) {
    auto parts = impl_->accumulate(batch, scale);
    loss += parts.total.item<double>() * scale;
    cross_entropy += parts.cross_entropy.item<double>() * scale;
    tokens += static_cast<int64_t>(batch.batch_size) * batch.seq_len;
  }
  return impl_->finish_step(loss, cross_entropy, tokens);
}

StepStats Replica::step_reduced(const Batch& batch,
                                const std::function<void(float* values, int64_t count)>& all_reduce) {
  impl_->model->train();
  impl_->optimizer->zero_grad();
  auto parts = impl_->accumulate(batch, 1.0);
  const int64_t total = impl_->flat.numel();
  // One contiguous host buffer: what a data-parallel job's gradient bucket is, here the whole model.
  std::vector<float> values(static_cast<size_t>(total) + 2);
  {
    torch::NoGradGuard no_grad;
    auto host = torch::from_blob(values.data(), {total}, torch::kFloat);
    auto tensors = impl_->model->parameters();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& info = impl_->parameters[i];
      auto slot = host.narrow(0, info.offset, info.numel);
      const auto& grad = tensors[i].grad();
      if (grad.defined()) slot.copy_(grad.reshape({-1})); else slot.zero_();
    }
    values[total] = static_cast<float>(parts.total.item<double>());
    values[total + 1] = static_cast<float>(parts.cross_entropy.item<double>());
    all_reduce(values.data(), total + 2);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& info = impl_->parameters[i];
      auto reduced = host.narrow(0, info.offset, info.numel).to(impl_->device).view(tensors[i].sizes());
      auto& grad = tensors[i].mutable_grad();
      if (grad.defined()) grad.copy_(reduced); else grad = reduced.clone();
    }
  }
  return impl_->finish_step(values[total], values[total + 1], static_cast<int64_t>(batch.batch_size) * batch.seq_len);
}

double Replica::evaluate(const std::vector<Batch>& batches) {
  if (batches.empty()) return std::nan("");
  torch::NoGradGuard no_grad;
  impl_->model->eval();
  double sum = 0;
  for (const auto& batch : batches) {
    auto [inputs, targets] = impl_->to_tensors(batch);  // fp32: precisions compare on one measure
    sum += language_model_loss(impl_->model->forward(inputs), targets, 0.0).cross_entropy.item<double>();
  }
  return sum / static_cast<double>(batches.size());
}

std::vector<float> Replica::logits(const std::vector<Token>& tokens) {
  torch::NoGradGuard no_grad;
  impl_->model->eval();
  auto input = torch::from_blob(const_cast<Token*>(tokens.data()), {1, static_cast<int64_t>(tokens.size())},
                                torch::kInt).to(impl_->device, torch::kLong);
  auto out = impl_->model->forward(input).to(torch::kCPU, torch::kFloat).contiguous();
  return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
}

std::vector<char> torch_saved_state_dict(const std::vector<ParameterInfo>& parameters, const std::vector<float>& flat,
                                         bool bf16) {
  c10::Dict<std::string, at::Tensor> state;  // keeps insertion order, as a state dict does
  for (const auto& p : parameters) {
    auto tensor = torch::from_blob(const_cast<float*>(flat.data() + p.offset), p.shape, torch::kFloat).clone();
    state.insert(p.name, bf16 ? tensor.to(torch::kBFloat16) : tensor);
  }
  return torch::pickle_save(c10::IValue(state));
}

namespace {

torch::Tensor token_tensor(const int32_t* tokens, int64_t count, const torch::Device& device) {
  return torch::from_blob(const_cast<int32_t*>(tokens), {1, count}, torch::kInt).to(device, torch::kLong);
}

// The last position's logits, host side.
std::vector<float> last_logits(const torch::Tensor& logits) {
  auto row = logits.select(1, logits.size(1) - 1).select(0, 0).to(torch::kCPU, torch::kFloat).contiguous();
  return std::vector<float>(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
}

}  // namespace

std::vector<float> Replica::logits_incremental(const std::vector<Token>& ids, int64_t prefill) {
  torch::NoGradGuard no_grad;
  impl_->model->eval();
  KvCache cache;
  std::vector<torch::Tensor> parts;
  int64_t at = 0;
  while (at < static_cast<int64_t>(ids.size())) {
    const int64_t count = at == 0 ? std::max<int64_t>(1, prefill) : 1;
    parts.push_back(impl_->model->forward(token_tensor(ids.data() + at, count, impl_->device), cache));
    at += count;
  }
  auto out = torch::cat(parts, 1).to(torch::kCPU, torch::kFloat).contiguous();
  return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
}

std::vector<int32_t> Replica::generate(const std::vector<int32_t>& prompt, const SamplingOptions& options,
                                       const std::function<void(int32_t)>& emit) {
  if (prompt.empty()) return {};
  torch::NoGradGuard no_grad;
  impl_->model->eval();
  const int64_t context = impl_->model_config.seq_len;
  std::mt19937_64 rng(options.seed);
  std::vector<int32_t> sequence = prompt;
  std::vector<int32_t> generated;
  KvCache cache;
  // The first pass of the cache, and each restart: the newest tokens that leave room to grow.
  auto prefill = [&](int64_t keep) {
    cache = KvCache{};
    const int64_t count = std::min<int64_t>(keep, static_cast<int64_t>(sequence.size()));
    return impl_->model->forward(token_tensor(sequence.data() + sequence.size() - count, count, impl_->device), cache);
  };
  torch::Tensor logits;
  if (options.kv_cache) logits = prefill(context);
  for (int64_t i = 0; i < options.tokens; ++i) {
    if (!options.kv_cache) {
      const int64_t count = std::min<int64_t>(context, static_cast<int64_t>(sequence.size()));
      logits = impl_->model->forward(token_tensor(sequence.data() + sequence.size() - count, count, impl_->device));
    }
    const int32_t next = draw_token(last_logits(logits), options, rng);
    sequence.push_back(next);
    generated.push_back(next);
    if (emit) emit(next);
    if (options.kv_cache && i + 1 < options.tokens) {
      logits = cache.length < context ? impl_->model->forward(token_tensor(&sequence.back(), 1, impl_->device), cache)
                                       : prefill(context / 2);
    }
  }
  return generated;
}

const ModelConfig& Replica::model_config() const { return impl_->model_config; }
const std::vector<ParameterInfo>& Replica::parameters() const { return impl_->parameters; }
int64_t Replica::parameter_count() const { return impl_->flat.numel(); }
int64_t Replica::steps_taken() const { return impl_->steps; }
void Replica::set_steps_taken(int64_t steps) { impl_->steps = std::max<int64_t>(0, steps); }
void Replica::set_budget_spent(double fraction) { impl_->budget_spent = fraction; }

OptimizerState Replica::export_optimizer_state() const {
  OptimizerState out;
  out.schedule_steps = impl_->steps;
  auto& states = impl_->optimizer->state();
  const auto params = impl_->model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = states.find(c10::guts::to_string(params[i].unsafeGetTensorImpl()));
    if (it == states.end()) return OptimizerState{impl_->steps, 0, {}, {}};  // no step taken yet
    auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    if (out.exp_avg.empty()) {
      out.adam_steps = s.step();
      out.exp_avg.resize(impl_->flat.numel());
      out.exp_avg_sq.resize(impl_->flat.numel());
    }
    const auto& info = impl_->parameters[i];
    auto m = s.exp_avg().detach().reshape({-1}).to(torch::kCPU, torch::kFloat).contiguous();
    auto v = s.exp_avg_sq().detach().reshape({-1}).to(torch::kCPU, torch::kFloat).contiguous();
    std::memcpy(out.exp_avg.data() + info.offset, m.data_ptr<float>(), info.numel * sizeof(float));
    std::memcpy(out.exp_avg_sq.data() + info.offset, v.data_ptr<float>(), info.numel * sizeof(float));
  }
  return out;
}

Status Replica::import_optimizer_state(const OptimizerState& state) {
  const auto n = static_cast<size_t>(impl_->flat.numel());
  if (state.adam_steps > 0 && (state.exp_avg.size() != n || state.exp_avg_sq.size() != n)) {
    return make_error(ErrorCode::inconsistent, "optimizer state holds " + std::to_string(state.exp_avg.size()) +
                                                   " moments, the model has " + std::to_string(n) + " parameters");
  }
  if (state.adam_steps < 0 || state.schedule_steps < 0) {
    return make_error(ErrorCode::invalid_argument, "optimizer state has a negative step count");
  }
  torch::NoGradGuard no_grad;
  auto& states = impl_->optimizer->state();
  const auto params = impl_->model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto key = c10::guts::to_string(params[i].unsafeGetTensorImpl());
    if (state.adam_steps == 0) {
      states.erase(key);
      continue;
    }
    const auto& info = impl_->parameters[i];
    auto load = [&](const std::vector<float>& from) {
      return torch::from_blob(const_cast<float*>(from.data() + info.offset), params[i].sizes(), torch::kFloat)
          .to(impl_->device)
          .clone();
    };
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(state.adam_steps);
    s->exp_avg(load(state.exp_avg));
    s->exp_avg_sq(load(state.exp_avg_sq));
    states[key] = std::move(s);
  }
  impl_->steps = state.schedule_steps;
  return {};
}

std::vector<float> Replica::read_parameters() const {
  std::vector<float> out(impl_->flat.numel());
  read_range(0, impl_->flat.numel(), out.data());
  return out;
}

void Replica::write_parameters(const std::vector<float>& values) {
  write_range(0, static_cast<int64_t>(values.size()), values.data());
}

void Replica::read_range(int64_t offset, int64_t count, float* out) const {
  auto source = impl_->flat.narrow(0, offset, count).to(torch::kCPU);
  std::memcpy(out, source.data_ptr<float>(), count * sizeof(float));
}

void Replica::write_range(int64_t offset, int64_t count, const float* in) {
  torch::NoGradGuard no_grad;
  auto source = torch::from_blob(const_cast<float*>(in), {count}, torch::kFloat);
  impl_->flat.narrow(0, offset, count).copy_(source);
}

int set_compute_threads(int threads, const std::string& precision) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Looked up at run time: another BLAS (MKL, reference) has no such setter and skips this step.
  using SetThreads = void (*)(int);
  auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!set_blas) {
    at::set_num_threads(threads);
    return at::get_num_threads();
  }
  const bool blas_products = precision != "bf16";
  set_blas(blas_products ? threads : 1);
  at::set_num_threads(blas_products ? 1 : threads);
  return threads;
}

}  // namespace archipelago::training
