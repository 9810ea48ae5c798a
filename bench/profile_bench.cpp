// Where one training step of a Llama goes, op by op (issue 42's profile): a random model of a
// Hugging Face config.json's shape (default SmolLM2-135M's) in fp32 or bf16 on one rank, one
// thread, the engine at stage 0 with AdamW (fp32 masters under bf16), warmed up, then one step
// under LibTorch's profiler. Each op's self time (its time less the ops it called) in the forward,
// the backward (keyed by the autograd node that ran it: "MmBackward0/aten::mm") and the optimizer
// step, against its bound measured in the same invocation: a matrix product's FLOPs (2·M·N·K from
// the recorded shapes) ÷ this thread's GEMM peak in the op's dtype, any other op's bytes ÷ the
// copy bandwidth (STREAM's copy: a 256 MiB tensor copied). An op's bytes are estimated as its
// inputs' elements plus one output of its largest input's (none for an in-place op), at the
// step's element size (the profiler records shapes, not dtypes: fp32 statistics in a bf16 step
// count 2 bytes each) — an estimate, good to a factor of about 2 per op.
// Freed memory is kept for reuse, as zero-train keeps it (zero/allocator.h).
//   bench_profile [--config FILE] [--seq 512] [--rows 1] [--dtype fp32|bf16] [--warmup 1] [--top 30]
#include <ATen/record_function.h>
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

#include "models/llama/llama.h"
#include "models/llama/llama_config.h"
#include "programs.h"
#include "zero/allocator.h"
#include "zero/compute.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/world.h"

namespace bench_profile {
namespace {

using Clock = std::chrono::steady_clock;
namespace profiler = torch::autograd::profiler;

double seconds_of(const std::function<void()>& fn, int repeats) {
  fn();  // warm-up
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// This thread's matrix-product peak in `dtype` (a 1024² product, best of 5) and copy bandwidth.
double gemm_peak(at::ScalarType dtype) {
  const int64_t n = 1024;
  const at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  at::Tensor c = at::empty({n, n}, dtype);
  return 2.0 * n * n * n / seconds_of([&] { at::mm_out(c, a, b); }, 5);
}
double copy_bandwidth() {
  const at::Tensor src = at::ones({64 << 20}), dst = at::zeros({64 << 20});
  return 2.0 * static_cast<double>(src.nbytes()) / seconds_of([&] { dst.copy_(src); }, 3);
}

struct OpTime {
  int64_t calls = 0;
  double self_us = 0;
  double flops = 0;  // matrix products
  double bytes = 0;  // the others (the estimate above)
};

// Ops that move no data of their own: views, and composites whose work is in the ops they call.
bool moves_nothing(const std::string& op) {
  static const char* kNames[] = {"aten::slice",     "aten::narrow",  "aten::as_strided", "aten::view",
                                 "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::transpose",
                                 "aten::t",         "aten::expand",  "aten::permute",    "aten::select",
                                 "aten::unsqueeze", "aten::squeeze", "aten::detach",     "aten::alias",
                                 "aten::to",        "aten::_to_copy", "aten::matmul",    "aten::linear",
                                 "aten::empty",     "aten::empty_like", "aten::empty_strided", "aten::item",
                                 "aten::_local_scalar_dense", "aten::contiguous", "aten::flatten",
                                 "aten::numpy_T",   "aten::split",   "aten::chunk",      "aten::unbind",
                                 "aten::resize_",   "aten::set_",    "aten::lift_fresh", "aten::zeros"};
  for (const char* name : kNames)
    if (op == name) return true;
  return false;
}

bool is_matmul(const std::string& op) {
  return op == "aten::mm" || op == "aten::addmm" || op == "aten::bmm" || op == "aten::baddbmm";
}

double matmul_flops(const std::string& op, const std::vector<std::vector<int64_t>>& shapes) {
  // mm(a [M,K], b [K,N]); addmm(bias, a, b); bmm(a [B,M,K], b [B,K,N]); baddbmm(c, a, b).
  const size_t first = op == "aten::addmm" || op == "aten::baddbmm" ? 1 : 0;
  if (shapes.size() < first + 2) return 0;
  const auto& a = shapes[first];
  const auto& b = shapes[first + 1];
  if (a.size() < 2 || b.size() < 2) return 0;
  const double batch = a.size() == 3 ? static_cast<double>(a[0]) : 1.0;
  return 2.0 * batch * static_cast<double>(a[a.size() - 2]) * static_cast<double>(a.back()) * static_cast<double>(b.back());
}

// An in-place op (copy_, add_, ...) writes its first input: no output besides.
double op_bytes(const std::string& op, const std::vector<std::vector<int64_t>>& shapes, int64_t element) {
  const bool in_place = !op.empty() && op.back() == '_';
  double inputs = 0, largest = 0;
  for (const auto& s : shapes) {
    double n = 1;
    for (int64_t d : s) n *= static_cast<double>(d);
    if (s.empty()) n = 0;  // scalars and non-tensors
    inputs += n;
    largest = std::max(largest, n);
  }
  return (inputs + (in_place ? 0 : largest)) * static_cast<double>(element);
}

// Self time per (phase, op) from the profiler's push/pop ranges, thread by thread.
// `phase_us`: each phase's own time (forward, backward, step), its ops and the rest.
std::map<std::pair<std::string, std::string>, OpTime> aggregate(const profiler::thread_event_lists& threads,
                                                                int64_t element, std::map<std::string, double>& phase_us) {
  std::map<std::pair<std::string, std::string>, OpTime> ops;
  for (const auto& events : threads) {
    struct Open {
      const profiler::LegacyEvent* event;
      double children_us = 0;
    };
    std::vector<Open> stack;
    for (const profiler::LegacyEvent& e : events) {
      if (e.kind() == profiler::EventKind::PushRange) {
        stack.push_back({&e});
      } else if (e.kind() == profiler::EventKind::PopRange && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double total = open.event->cpuElapsedUs(e);
        if (!stack.empty()) stack.back().children_us += total;
        const std::string name = open.event->name();
        if (name == "forward" || name == "backward" || name == "step") {  // the phases themselves
          phase_us[name] += total;
          continue;
        }
        // The phase: the outermost open range; in backward, the innermost autograd node.
        std::string phase = "other", node;
        for (const Open& o : stack) {
          const std::string n = o.event->name();
          if (phase == "other" && (n == "forward" || n == "backward" || n == "step")) phase = n;
          if (n.find("Backward") != std::string::npos) node = n;
        }
        const bool is_node = name.find("Backward") != std::string::npos;
        const std::string key = phase == "backward" && !node.empty() && !is_node ? node + "/" + name : name;
        OpTime& t = ops[{phase, key}];
        ++t.calls;
        t.self_us += total - open.children_us;
        const auto shapes = open.event->shapes();
        if (is_matmul(name)) t.flops += matmul_flops(name, shapes);
        else if (!moves_nothing(name) && !is_node) t.bytes += op_bytes(name, shapes, element);
      }
    }
  }
  return ops;
}

// The fused kernels against the LibTorch ops they replace and against their memory bound
// (bytes each must move ÷ the copy bandwidth): SwiGLU forward (reads gate and up, writes the
// product) and backward (reads dout, gate, up; writes both gradients) at `rows` × `width`.
void kernel_benchmarks(int64_t rows, int64_t width, at::ScalarType dtype, double stream) {
  const at::Tensor gate_in = torch::randn({rows, width}).to(dtype), up_in = torch::randn({rows, width}).to(dtype);
  const at::Tensor dout = torch::randn({rows, width}).to(dtype);
  const double element = static_cast<double>(gate_in.element_size()), n = static_cast<double>(gate_in.numel());
  fmt::print("| SwiGLU {} x {}, {} | forward ms | backward ms | forward bound ms (3 n) | backward bound ms (5 n) |\n"
             "| --- | ---: | ---: | ---: | ---: |\n",
             rows, width, dtype == at::kBFloat16 ? "bf16" : "fp32");
  for (const bool fused : {false, true}) {
    const at::Tensor gate = gate_in.clone().requires_grad_(true), up = up_in.clone().requires_grad_(true);
    at::Tensor out;
    const double forward = seconds_of([&] { out = fused ? zero::swiglu(gate, up) : torch::silu(gate) * up; }, 5);
    const double backward = seconds_of(
        [&] {
          const at::Tensor y = fused ? zero::swiglu(gate, up) : torch::silu(gate) * up;
          y.backward(dout);
        },
        5) - forward;
    fmt::print("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", fused ? "fused (zero::swiglu)" : "LibTorch silu · up",
               forward * 1e3, backward * 1e3, 3 * n * element / stream * 1e3, 5 * n * element / stream * 1e3);
  }
  fmt::print("\n");
}

// Causal attention at the model's heads and `seq` tokens: LibTorch's eager ops (the [T, T]
// scores) against zero::causal_attention at several query blocks, and against the FLOP bound of
// the products causal attention needs (half of the T × T scores: forward q·kᵀ and p·v, 2·H·T²·D;
// backward those again and three more, 5·H·T²·D) at this thread's GEMM peak.
void attention_benchmarks(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t seq, at::ScalarType dtype,
                          double peak) {
  const at::Tensor q_in = torch::randn({1, heads, seq, head_dim}).to(dtype);
  const at::Tensor k_in = torch::randn({1, kv_heads, seq, head_dim}).to(dtype);
  const at::Tensor v_in = torch::randn({1, kv_heads, seq, head_dim}).to(dtype), dout = torch::randn_like(q_in);
  const double causal = static_cast<double>(heads) * seq * seq * head_dim;
  fmt::print("| attention {} heads ({} kv) × {} tokens × {}, {} | forward ms | backward ms |\n| --- | ---: | ---: |\n",
             heads, kv_heads, seq, head_dim, dtype == at::kBFloat16 ? "bf16" : "fp32");
  fmt::print("| bound: causal products at the GEMM peak | {:.2f} | {:.2f} |\n", 2 * causal / peak * 1e3,
             5 * causal / peak * 1e3);
  for (const int64_t block : {int64_t{-1}, int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}}) {
    const at::Tensor q = q_in.clone().requires_grad_(true), k = k_in.clone().requires_grad_(true),
                     v = v_in.clone().requires_grad_(true);
    auto attend = [&] { return block < 0 ? zero::eager_causal_attention(q, k, v) : zero::causal_attention(q, k, v, 0, block); };
    // Best of many at short lengths, where a few ms are within a noisy VM's jitter.
    const int repeats = seq <= 512 ? 15 : 3;
    const double forward = seconds_of([&] { attend(); }, repeats);
    const double backward = seconds_of([&] { attend().backward(dout); }, repeats) - forward;
    fmt::print("| {} | {:.2f} | {:.2f} |\n", block < 0 ? std::string("LibTorch eager ([T, T] scores)") : fmt::format("zero::causal_attention, blocks of {}", block),
               forward * 1e3, backward * 1e3);
  }
  fmt::print("\n");
}

// RMSNorm over `rows` × `width` (forward reads x, writes y: 2 n; backward reads dy and x, writes
// dx: 3 n, at the copy bandwidth) and the loss from `rows` hidden states of `width` through a
// `vocab` × `width` output projection (its products' 2·N·V·C forward and 4·N·V·C backward at the
// GEMM peak): LibTorch's ops against the fused ones.
void norm_and_loss_benchmarks(int64_t rows, int64_t width, int64_t vocab, at::ScalarType dtype, double stream,
                              double peak) {
  const char* name = dtype == at::kBFloat16 ? "bf16" : "fp32";
  const at::Tensor x_in = torch::randn({rows, width}).to(dtype), w_in = torch::randn({width}).to(dtype);
  const at::Tensor dy = torch::randn({rows, width}).to(dtype);
  const double n = static_cast<double>(x_in.numel()) * x_in.element_size();
  fmt::print("| RMSNorm {} x {}, {} | forward ms | backward ms |\n| --- | ---: | ---: |\n", rows, width, name);
  fmt::print("| bound: copy bandwidth | {:.3f} | {:.3f} |\n", 2 * n / stream * 1e3, 3 * n / stream * 1e3);
  for (const bool fused : {false, true}) {
    const at::Tensor x = x_in.clone().requires_grad_(true), w = w_in.clone().requires_grad_(true);
    auto norm = [&] { return fused ? zero::rms_norm(x, w, 1e-5) : zero::eager_rms_norm(x, w, 1e-5); };
    const double forward = seconds_of([&] { norm(); }, 5);
    const double backward = seconds_of([&] { norm().backward(dy); }, 5) - forward;
    fmt::print("| {} | {:.3f} | {:.3f} |\n", fused ? "fused (zero::rms_norm)" : "LibTorch ops", forward * 1e3,
               backward * 1e3);
  }
  const at::Tensor h_in = torch::randn({rows, width}).to(dtype), out_in = (torch::randn({vocab, width}) * 0.02).to(dtype);
  const at::Tensor targets = torch::randint(vocab, {rows}, torch::kLong);
  const double products = 2.0 * static_cast<double>(rows) * vocab * width;
  fmt::print("\n| loss, {} hidden states x {} vocabulary, {} | forward ms | backward ms |\n| --- | ---: | ---: |\n",
             rows, vocab, name);
  fmt::print("| bound: products at the GEMM peak | {:.1f} | {:.1f} |\n", products / peak * 1e3, 2 * products / peak * 1e3);
  for (const bool fused : {false, true}) {
    const at::Tensor h = h_in.clone().requires_grad_(true), w = out_in.clone().requires_grad_(true);
    auto loss = [&] {
      return fused ? zero::linear_cross_entropy(h, w, targets) : zero::eager_linear_cross_entropy(h, w, targets);
    };
    const double forward = seconds_of([&] { loss(); }, 3);
    const double backward = seconds_of([&] { loss().backward(); }, 3) - forward;
    fmt::print("| {} | {:.1f} | {:.1f} |\n", fused ? "chunked (zero::linear_cross_entropy)" : "LibTorch: whole logits",
               forward * 1e3, backward * 1e3);
  }
  fmt::print("\n");
}

// Rotary embedding of `heads` heads of `head_dim` over `seq` tokens, read out of a projection's
// [1, T, heads·D] output as attention reads them: LibTorch's ops against the fused kernel and the
// copy bound (forward reads x and writes the result, backward reads the gradient and writes x's:
// 2 n each; the cos and sin tables are cache-resident).
void rope_benchmarks(int64_t heads, int64_t head_dim, int64_t seq, at::ScalarType dtype, double stream) {
  const at::Tensor angles = torch::rand({seq, head_dim}) * 20;
  const at::Tensor cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
  const at::Tensor projected = torch::randn({1, seq, heads * head_dim}).to(dtype);
  const at::Tensor dout = torch::randn({1, heads, seq, head_dim}).to(dtype);
  const double n = static_cast<double>(projected.numel()) * projected.element_size();
  fmt::print("| RoPE {} heads x {} tokens x {}, {} | forward ms | backward ms |\n| --- | ---: | ---: |\n", heads, seq,
             head_dim, dtype == at::kBFloat16 ? "bf16" : "fp32");
  fmt::print("| bound: copy bandwidth | {:.3f} | {:.3f} |\n", 2 * n / stream * 1e3, 2 * n / stream * 1e3);
  for (const bool fused : {false, true}) {
    const at::Tensor p = projected.clone().requires_grad_(true);
    auto rotate = [&] {
      const at::Tensor x = p.view({1, seq, heads, head_dim}).transpose(1, 2);
      return fused ? zero::rotary_embedding(x, cos, sin) : zero::eager_rotary_embedding(x, cos, sin);
    };
    const double forward = seconds_of([&] { rotate(); }, 5);
    const double backward = seconds_of([&] { rotate().backward(dout); }, 5) - forward;
    fmt::print("| {} | {:.3f} | {:.3f} |\n", fused ? "fused (zero::rotary_embedding)" : "LibTorch ops", forward * 1e3,
               backward * 1e3);
  }
  fmt::print("\n");
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"one Llama training step, op by op, against each op's bound"};
  std::string config_path = "tests/models/hf_configs/HuggingFaceTB__SmolLM2-135M.config.json";
  std::string dtype_name = "fp32";
  int64_t seq = 512, rows = 1, warmup = 1, top = 30;
  app.add_option("--config", config_path, "a Hugging Face config.json")->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--rows", rows)->capture_default_str();
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  app.add_option("--warmup", warmup, "steps before the profiled one")->capture_default_str();
  app.add_option("--top", top, "ops printed per phase")->capture_default_str();
  int64_t timed = 1;
  app.add_option("--timed", timed, "steps timed without the profiler (the median is printed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bool profiled = true;
  app.add_flag("!--no-profile", profiled, "only the timed steps: no profiled step, no op tables");
  bool kernels = false;
  app.add_flag("--kernels", kernels, "only the fused kernels' microbenchmarks (SwiGLU, attention, RoPE, RMSNorm, the loss at --seq x --rows)");
  bool flush_denormal = false;
  app.add_flag("--flush-denormal", flush_denormal, "subnormal floats as zero (torch.set_flush_denormal)");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(1);
  zero::keep_freed_memory();  // as zero-train: each step reuses the last one's memory
  if (flush_denormal) at::globalContext().setFlushDenormal(true);
  const bool bf16 = dtype_name == "bf16";
  const at::ScalarType dtype = bf16 ? at::kBFloat16 : at::kFloat;

  const double peak = gemm_peak(dtype), stream = copy_bandwidth();
  const zero::llama::LlamaConfig c = zero::llama::read_llama_config(config_path);
  if (kernels) {
    fmt::print("bounds measured here: copy {:.1f} GB/s (256 MiB), one thread\n\n", stream / 1e9);
    kernel_benchmarks(rows * seq, c.intermediate_size, dtype, stream);
    attention_benchmarks(c.num_attention_heads, c.num_key_value_heads, c.head_dim, seq, dtype, peak);
    rope_benchmarks(c.num_attention_heads, c.head_dim, rows * seq, dtype, stream);
    norm_and_loss_benchmarks(rows * seq, c.hidden_size, c.vocab_size, dtype, stream, peak);
    return 0;
  }
  torch::manual_seed(1);
  zero::llama::LlamaForCausalLM model(c, *zero::llama::random_weights(), dtype);
  zero::Config config = zero::Config::parse(
      R"({"train_micro_batch_size_per_gpu": )" + std::to_string(rows) +
      R"(, "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}})" +
      (bf16 ? R"(, "bf16": {"enabled": true}})" : "}"));
  zero::World world = zero::World::single_process();
  config.resolve({.world_size = 1});
  zero::Engine engine(model, config, world);
  const at::Tensor tokens = torch::randint(0, std::min<int64_t>(c.vocab_size, 256), {rows, seq + 1}, torch::kLong);
  const at::Tensor x = tokens.narrow(1, 0, seq), y = tokens.narrow(1, 1, seq);
  auto step = [&] {
    at::Tensor loss;
    {
      RECORD_USER_SCOPE("forward");
      loss = engine.forward([&] { return model.loss(x, y); });
    }
    {
      RECORD_USER_SCOPE("backward");
      engine.backward(loss);
    }
    {
      RECORD_USER_SCOPE("step");
      engine.step();
    }
  };
  auto minor_faults = [] {
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    return static_cast<int64_t>(r.ru_minflt);
  };
  for (int64_t i = 0; i < warmup; ++i) {
    const int64_t faults = minor_faults();
    step();
    fmt::print(stderr, "warm-up step {}: {} minor page faults\n", i + 1, minor_faults() - faults);
  }
  const int64_t plain_faults = minor_faults();
  std::vector<double> plain_steps;
  for (int64_t i = 0; i < timed; ++i) {
    const auto plain_start = Clock::now();
    step();
    plain_steps.push_back(std::chrono::duration<double>(Clock::now() - plain_start).count());
  }
  std::sort(plain_steps.begin(), plain_steps.end());
  const double plain = plain_steps[plain_steps.size() / 2];  // the median
  const int64_t plain_fresh = (minor_faults() - plain_faults) / timed;
  const double model_flops = 6.0 * static_cast<double>(zero::llama::llama_parameter_count(c)) * rows * seq;
  if (!profiled) {
    fmt::print("{}, {} x {} tokens, {}: median of {} steps without the profiler {:.3f} s ({:.1f} GFLOP/s, {:.0f} % of "
               "the GEMM peak {:.1f} GFLOP/s)\n",
               config_path, rows, seq, dtype_name, timed, plain, model_flops / plain / 1e9,
               100 * model_flops / plain / peak, peak / 1e9);
    return 0;
  }
  const torch::profiler::impl::ProfilerConfig profile(torch::profiler::impl::ProfilerState::CPU,
                                                      /*report_input_shapes=*/true);
  // A profiled step first, discarded: the profiler's records take memory that the step's tensors
  // would otherwise find free, and fault in anew inside the ops of the profiled step.
  profiler::enableProfilerLegacy(profile);
  step();
  profiler::disableProfilerLegacy();
  profiler::enableProfilerLegacy(profile);
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto start = Clock::now();
  step();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  getrusage(RUSAGE_SELF, &after);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  std::map<std::string, double> phase_wall_us;
  const auto ops = aggregate(profiler::disableProfilerLegacy(), bf16 ? 2 : 4, phase_wall_us);

  fmt::print("{}: {} layers, hidden {}, {} parameters; {} x {} tokens, {}, one thread\n", config_path,
             c.num_hidden_layers, c.hidden_size, zero::llama::llama_parameter_count(c), rows, seq, dtype_name);
  fmt::print("bounds measured here: GEMM {:.1f} GFLOP/s ({}, 1024^2), copy {:.1f} GB/s (256 MiB)\n", peak / 1e9,
             dtype_name, stream / 1e9);
  fmt::print("a step without the profiler (median of {}): {:.3f} s ({:.1f} GFLOP/s, {:.0f} % of the GEMM peak; {} minor page faults)\n",
             timed, plain, model_flops / plain / 1e9, 100 * model_flops / plain / peak, plain_fresh);
  fmt::print("profiled step: {:.3f} s (6 x parameters x tokens = {:.1f} GFLOP: {:.1f} GFLOP/s, {:.0f} % of the GEMM peak)\n",
             wall, model_flops / 1e9, model_flops / wall / 1e9, 100 * model_flops / wall / peak);
  fmt::print("in it: {} minor page faults ({:.0f} MiB of fresh pages), {:.3f} s of system time\n\n",
             after.ru_minflt - before.ru_minflt, static_cast<double>(after.ru_minflt - before.ru_minflt) * 4096 / (1 << 20),
             seconds(after.ru_stime) - seconds(before.ru_stime));
  {
    double gemm_us = 0, gemm_flops = 0, rest_us = 0;
    for (const auto& [key, t] : ops) {
      if (t.flops > 0) {
        gemm_us += t.self_us;
        gemm_flops += t.flops;
      } else {
        rest_us += t.self_us;
      }
    }
    double phases_us = 0;
    for (const auto& [phase, us] : phase_wall_us) phases_us += us;
    fmt::print("summary: matrix products {:.0f} ms ({:.0f} % of the step; at {:.0f} % of the GEMM peak), other aten ops "
               "{:.0f} ms ({:.0f} %), outside aten ops {:.0f} ms ({:.0f} %)\n\n",
               gemm_us / 1e3, 100 * gemm_us / 1e6 / wall, 100 * gemm_flops / (gemm_us * 1e-6) / peak, rest_us / 1e3,
               100 * rest_us / 1e6 / wall, (wall * 1e6 - gemm_us - rest_us) / 1e3,
               100 * (wall * 1e6 - gemm_us - rest_us) / 1e6 / wall);
  }
  for (const std::string phase : {"forward", "backward", "step", "other"}) {
    std::vector<std::pair<std::string, OpTime>> rows_of_phase;
    double phase_us = 0, bound_us_sum = 0;
    for (const auto& [key, t] : ops) {
      if (key.first != phase) continue;
      rows_of_phase.emplace_back(key.second, t);
      phase_us += t.self_us;
    }
    if (rows_of_phase.empty()) continue;
    std::sort(rows_of_phase.begin(), rows_of_phase.end(),
              [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
    for (const auto& [name, t] : rows_of_phase)
      bound_us_sum += 1e6 * (t.flops > 0 ? t.flops / peak : t.bytes / stream);
    const double inside = phase_wall_us.count(phase) ? phase_wall_us.at(phase) : phase_us;
    fmt::print(
        "### {}: {:.1f} ms ({:.0f} % of the step), {:.1f} ms of it in aten ops (the rest: the engine's own work and "
        "kernels, e.g. the fused AdamW); the ops' bounds add up to {:.1f} ms\n\n",
        phase, inside / 1e3, 100 * inside / 1e6 / wall, phase_us / 1e3, bound_us_sum / 1e3);
    fmt::print("| op | calls | self ms | % of step | rate | bound ms | ÷ bound |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int64_t shown = 0;
    for (const auto& [name, t] : rows_of_phase) {
      if (shown++ == top) break;
      const double bound_us = 1e6 * (t.flops > 0 ? t.flops / peak : t.bytes / stream);
      const std::string rate = t.flops > 0 ? fmt::format("{:.1f} GFLOP/s", t.flops / t.self_us / 1e3)
                                           : fmt::format("{:.2f} GB/s", t.bytes / t.self_us / 1e3);
      fmt::print("| {} | {} | {:.2f} | {:.1f} | {} | {:.2f} | {:.1f} |\n", name, t.calls, t.self_us / 1e3,
                 100 * t.self_us / 1e6 / wall, rate, bound_us / 1e3, bound_us > 0 ? t.self_us / bound_us : 0.0);
    }
    fmt::print("\n");
  }
  return 0;
}

}  // namespace bench_profile
