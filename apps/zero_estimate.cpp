// zero-estimate — memory and communication of a ZeRO job before it starts (docs/observability.md).
//
//   zero-estimate --params 7.5B --ranks-per-node 8 --nodes 8           # cold: a parameter count
//   zero-estimate --params 2851M --largest-layer 32M --ranks-per-node 8  # DeepSpeed's t5-3b table
//   zero-estimate --gpt 48,25,1600,256,1024 --micro-batch 1 --seq 1024  # live: a GPT shape (L,NH,C,V,maxT)
//   zero-estimate --llmc gpt2_124M.bin --device-memory 80 --host-memory 1000
//   zero-estimate --model Mixtral-8x7B/ --ranks-per-node 8 --nodes 4 --expert-parallel 8  # a HF config.json
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>

#include "models/gpt/gpt.h"
#include "models/llama/llama_config.h"
#include "zero/error.h"
#include "zero/estimate.h"

namespace est = zero::estimate;

namespace {

zero::gpt::GptShape shape_from_flag(const std::string& text) {
  int v[5] = {};
  if (std::sscanf(text.c_str(), "%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5 ||
      *std::min_element(v, v + 5) < 1 || v[2] % v[1] != 0) {
    throw zero::Error("--gpt " + text + ": expected L,NH,C,V,maxT (positive, C a multiple of NH), e.g. 12,12,768,50257,1024",
                      "--gpt");
  }
  return {.max_seq = v[4], .vocab = v[3], .layers = v[0], .heads = v[1], .channels = v[2],
          .padded_vocab = (v[3] + 63) / 64 * 64};  // as zero-train pads it
}

// The 256-int header of an llm.c checkpoint only: [magic, version, maxT, V, L, NH, C, Vp].
zero::gpt::GptShape shape_from_llmc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t h[256] = {};
  if (!in.read(reinterpret_cast<char*>(h), sizeof h)) throw zero::Error(path + ": no 1024-byte llm.c header", path);
  if (h[0] != zero::gpt::kCheckpointMagic)
    throw zero::Error(path + ": not an llm.c checkpoint (magic " + std::to_string(h[0]) + ")", path);
  return {.max_seq = h[2], .vocab = h[3], .layers = h[4], .heads = h[5], .channels = h[6], .padded_vocab = h[7]};
}

// The GPT's trainable parameters in the engine's order, and each one's unit (-1: the root).
est::EngineLayoutInput gpt_parameters(const zero::gpt::GptShape& s) {
  const int64_t C = s.channels;
  est::EngineLayoutInput in;
  auto add = [&](int64_t numel, int unit) {
    in.numels.push_back(numel);
    in.units.push_back(unit);
  };
  // LibTorch lists a module's own parameters before its children's: wte, wpe, lnfw, lnfb, blocks.
  for (int64_t n : {int64_t{s.padded_vocab} * C, int64_t{s.max_seq} * C, C, C}) add(n, -1);
  for (int l = 0; l < s.layers; ++l) {
    for (int64_t n : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}) add(n, l);
  }
  return in;
}

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / est::kGiB); }

// A Hugging Face model's trainable parameters as rank 0 holds them at expert-parallel size `ep`
// (experts [0, E/ep) of each MoE layer), each decoder layer a unit, experts flagged. In the hub's
// tensor order (the engine's registration order may pad a few elements differently).
est::EngineLayoutInput hf_parameters(const zero::llama::LlamaConfig& c, int ep) {
  est::EngineLayoutInput in;
  const int64_t mine = c.moe.num_experts / std::max(1, ep);
  for (const zero::llama::HfTensor& t : zero::llama::llama_tensors(c)) {
    const size_t at = t.name.find(".experts.");
    const bool expert = at != std::string::npos;
    if (expert && ep > 1 && std::stoll(t.name.substr(at + 9)) >= mine) continue;
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    in.numels.push_back(numel);
    in.units.push_back(t.layer);
    in.expert.push_back(expert);
  }
  in.expert_parallel = ep;
  return in;
}

// zerocpp's engine: each stage's model states by category (AdamW, no offload), the marked stage's
// row with ">"; with expert parallelism, the experts' and the dense part.
void print_engine_states(est::EngineLayoutInput in, int marked, const std::string& title) {
  fmt::print("\nzerocpp's engine, {} without offload ({}, AdamW; padding included; GB = 2^30):\n", title,
             in.dtype_bytes == 4 ? "fp32" : "bf16");
  for (int k : {0, 1, 2, 3}) {
    in.stage = k;
    const est::EngineStates s = est::engine_model_states(in);
    fmt::print("{} stage {}: parameters {} | gradients {} | fp32 master {} | optimizer {} | total {} GB{}{}\n",
               k == marked ? ">" : " ", k, gib(s.parameters), gib(s.gradients), gib(s.master_weights),
               gib(s.optimizer_state), gib(s.total()),
               in.expert_parallel > 1
                   ? fmt::format(" (experts {} GB, dense {} GB)", gib(s.experts.total()), gib(s.total() - s.experts.total()))
                   : "",
               k == 3 ? fmt::format(" (+ gather buffers, {} GB a unit)", gib(s.largest_unit_bytes)) : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zero-estimate: model-state memory, communication and what fits, before a ZeRO job starts"};
  std::string params_text, largest_text, gpt_text, llmc, network = "100GbE";
  int per_node = 1, nodes = 1, micro = 1, seq = 0, dtype_bytes = 2;
  double buffer_factor = 1.5, bandwidth = 0, device_memory = 0, host_memory = 0;
  bool checkpointing = false;
  int stage = -1;
  int tensor_parallel = 1, pipeline_stages = 1, expert_parallel = 1;
  std::string model_dir;
  std::string offload_optimizer = "none", offload_param = "none";
  app.add_option("--params", params_text, "parameters (7.5B, 2851M, ...)");
  app.add_option("--largest-layer", largest_text, "parameters of the largest layer (default: Ψ/100 cold; live: a block or wte)");
  app.add_option("--gpt", gpt_text, "a GPT shape L,NH,C,V,maxT (live: exact parameters and layers)");
  app.add_option("--llmc", llmc, "an llm.c checkpoint: its shape (only the header is read)")->check(CLI::ExistingFile);
  app.add_option("--model", model_dir, "a Hugging Face model directory (Llama, Mixtral, Qwen2-MoE: only config.json is read)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--expert-parallel", expert_parallel, "with --model: expert_parallel.autoep_size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ranks-per-node", per_node, "devices (ranks) per node")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--nodes", nodes, "nodes")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--tensor-parallel", tensor_parallel, "tensor-parallel group size (tensor_parallel.autotp_size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--pipeline-parallel", pipeline_stages, "pipeline stages (pipeline_parallel.pp_size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--buffer-factor", buffer_factor, "DeepSpeed's additional_buffer_factor for host memory")->capture_default_str();
  app.add_option("--dtype-bytes", dtype_bytes, "bytes per element on the wire and of 16-bit weights (2; 4 for fp32)")
      ->check(CLI::IsMember({2, 4}))->capture_default_str();
  app.add_option("--network", network, "100GbE, NDR (InfiniBand 400G) or NVLink")->capture_default_str();
  app.add_option("--bandwidth", bandwidth, "per-rank bandwidth in GB/s (instead of --network)");
  app.add_flag("--activation-checkpointing", checkpointing, "GPT activations with every block checkpointed");
  app.add_option("--stage", stage, "mark this stage's rows (default: none marked)")->check(CLI::Range(0, 3));
  app.add_option("--offload-optimizer", offload_optimizer, "with --stage: the row to mark")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}))->capture_default_str();
  app.add_option("--offload-param", offload_param, "with --stage 3: the row to mark")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}))->capture_default_str();
  app.add_option("--micro-batch", micro, "rows per rank, for the GPT's activations")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per row (default maxT)")->check(CLI::NonNegativeNumber);
  app.add_option("--device-memory", device_memory, "GB (2^30) per device: list what fits");
  app.add_option("--host-memory", host_memory, "GB (2^30) per host: list what fits");
  CLI11_PARSE(app, argc, argv);
  try {
    std::optional<zero::gpt::GptShape> shape;
    if (!gpt_text.empty()) shape = shape_from_flag(gpt_text);
    if (!llmc.empty()) shape = shape_from_llmc(llmc);
    double params = 0, largest = 0;
    std::optional<zero::llama::LlamaConfig> hf;
    if (!model_dir.empty()) hf = zero::llama::read_llama_config(model_dir + "/config.json");
    if (hf) {
      params = static_cast<double>(zero::llama::llama_parameter_count(*hf));
      for (int64_t l = 0; l < hf->num_hidden_layers; ++l) {
        double layer = 0;
        for (const auto& t : zero::llama::llama_tensors(*hf)) {
          if (t.layer != l) continue;
          double n = 1;
          for (int64_t d : t.shape) n *= static_cast<double>(d);
          layer += n;
        }
        largest = std::max(largest, layer);
      }
    } else if (shape) {
      params = static_cast<double>(zero::gpt::checkpoint_numel(*shape));
      // The largest layer stage 3 gathers at once: a block (12C² + 13C), or wte when it is larger.
      const double c = shape->channels;
      largest = std::max(static_cast<double>(shape->padded_vocab) * c, 12 * c * c + 13 * c);
    } else if (!params_text.empty()) {
      params = est::parse_count(params_text, "--params");
      largest = largest_text.empty() ? params / 100 : est::parse_count(largest_text, "--largest-layer");
    } else {
      throw zero::Error("give --params N, --gpt L,NH,C,V,maxT, --llmc FILE or --model DIR", "--params");
    }
    const int ranks = per_node * nodes;
    if (expert_parallel > 1) {
      if (!hf || hf->moe.num_experts == 0)
        throw zero::Error("--expert-parallel needs --model with experts (Mixtral, Qwen2-MoE)", "--expert-parallel");
      if (ranks % expert_parallel != 0 || hf->moe.num_experts % expert_parallel != 0) {
        throw zero::Error(fmt::format("--expert-parallel {} must divide the {} ranks and the {} experts", expert_parallel,
                                      ranks, hf->moe.num_experts),
                          "--expert-parallel");
      }
    }
    if (ranks % tensor_parallel != 0) {
      throw zero::Error(fmt::format("--tensor-parallel {} does not divide the {} ranks", tensor_parallel, ranks),
                        "--tensor-parallel");
    }
    if (ranks / tensor_parallel % pipeline_stages != 0) {
      throw zero::Error(fmt::format("--pipeline-parallel {} does not divide the {} ranks into {} tensor-parallel groups",
                                    pipeline_stages, ranks, ranks / tensor_parallel),
                        "--pipeline-parallel");
    }
    fmt::print("{:.4g} parameters (largest layer {:.4g}) on {} node{} x {} device{} = {} ranks\n\n", params, largest, nodes,
               nodes == 1 ? "" : "s", per_node, per_node == 1 ? "" : "s", ranks);

    fmt::print("DeepSpeed's estimators (GB = 2^30; host with buffer factor {}):\n", buffer_factor);
    fmt::print("  {:<52} {:>10} {:>16} {:>19}\n", "", "per device", "per host", "per host, no init");
    struct Row {
      std::string name;
      est::HostDevice with_init, without_init;
    };
    std::vector<Row> rows;
    rows.push_back({"ZeRO-3, offload_param=cpu, offload_optimizer=cpu",
                    est::deepspeed_zero3(params, largest, per_node, nodes, true, true, true, buffer_factor),
                    est::deepspeed_zero3(params, largest, per_node, nodes, true, true, false, buffer_factor)});
    rows.push_back({"ZeRO-3, offload_param=none, offload_optimizer=cpu",
                    est::deepspeed_zero3(params, largest, per_node, nodes, true, false, true, buffer_factor),
                    est::deepspeed_zero3(params, largest, per_node, nodes, true, false, false, buffer_factor)});
    rows.push_back({"ZeRO-3, offload_param=none, offload_optimizer=none",
                    est::deepspeed_zero3(params, largest, per_node, nodes, false, false, true, buffer_factor),
                    est::deepspeed_zero3(params, largest, per_node, nodes, false, false, false, buffer_factor)});
    rows.push_back({"ZeRO-2, offload_optimizer=cpu", est::deepspeed_zero2(params, per_node, nodes, true, buffer_factor),
                    est::deepspeed_zero2(params, per_node, nodes, true, buffer_factor)});
    rows.push_back({"ZeRO-2, offload_optimizer=none", est::deepspeed_zero2(params, per_node, nodes, false, buffer_factor),
                    est::deepspeed_zero2(params, per_node, nodes, false, buffer_factor)});
    // The row of the configuration asked for (NVMe counts as offloaded: DeepSpeed's estimators
    // have no NVMe rows; the host figure is then an upper bound).
    const auto off = [](const std::string& d) { return d == "none" ? "none" : "cpu"; };
    const std::string chosen = stage == 3 ? fmt::format("ZeRO-3, offload_param={}, offload_optimizer={}", off(offload_param),
                                                        off(offload_param) == std::string("cpu") ? "cpu" : off(offload_optimizer))
                               : stage >= 0 ? fmt::format("ZeRO-2, offload_optimizer={}", off(offload_optimizer))
                                            : "";
    for (const Row& r : rows) {
      fmt::print("{} {:<52} {:>10} {:>16} {:>19}\n", r.name == chosen ? ">" : " ", r.name, gib(r.with_init.device),
                 gib(r.with_init.host), r.name.rfind("ZeRO-3", 0) == 0 ? gib(r.without_init.host) : "-");
    }
    if (stage >= 0 && stage < 2)
      fmt::print("  (stages 0 and 1: DeepSpeed has no estimator; its ZeRO-2 row is marked, the paper's P_os below)\n");
    const est::PaperStates p = est::zero_paper(params, ranks);
    fmt::print("\nThe ZeRO paper's model states per device (mixed-precision Adam, K = 12; GB = 1e9):\n");
    fmt::print("  baseline (DDP) {:.2f} | P_os {:.2f} | P_os+g {:.2f} | P_os+g+p {:.2f}  ({:.0f} bytes per parameter "
               "without ZeRO)\n",
               p.baseline / 1e9, p.os / 1e9, p.os_g / 1e9, p.os_g_p / 1e9, p.baseline / params);

    if (tensor_parallel > 1 || pipeline_stages > 1) {
      // docs/tensor_parallel.md, docs/pipeline_parallel.md: each rank holds 1/TP of its stage's
      // weights (the norms, a vanishing share, whole on every rank; the stages taken as equal),
      // and ZeRO partitions that over the world / (TP × stages) data-parallel ranks.
      const double sliced = params / tensor_parallel / pipeline_stages;
      const int data_parallel = ranks / tensor_parallel / pipeline_stages;
      const est::PaperStates t = est::zero_paper(sliced, data_parallel);
      fmt::print("With {}tensor parallelism {} ({} data-parallel ranks), per device (GB = 1e9; the norms counted as "
                 "split{}):\n",
                 pipeline_stages > 1 ? fmt::format("{} pipeline stages, ", pipeline_stages) : "", tensor_parallel,
                 data_parallel, pipeline_stages > 1 ? ", the stages equal" : "");
      fmt::print("  baseline (DDP) {:.2f} | P_os {:.2f} | P_os+g {:.2f} | P_os+g+p {:.2f}\n", t.baseline / 1e9, t.os / 1e9,
                 t.os_g / 1e9, t.os_g_p / 1e9);
      for (int k : {0, 1, 2, 3}) {
        fmt::print("{} stage {}: data-parallel {:.3f} GB sent per step and rank\n", k == stage ? ">" : " ", k,
                   est::comm_bytes_per_step(sliced, data_parallel, k, dtype_bytes) / 1e9);
      }
      if (shape && tensor_parallel > 1) {
        // Megatron's all-reduces of B×T×C per micro-step: two per block each way, the embedding's
        // and the lm_head input's (all the layers': with stages, a stage makes its share of them).
        const double tokens = static_cast<double>(micro) * (seq > 0 ? seq : shape->max_seq);
        const double message = (4.0 * shape->layers + 2) * tokens * shape->channels * dtype_bytes;
        fmt::print("  tensor-parallel all-reduces per micro-step and rank: {:.3f} GB of messages, {:.3f} GB sent\n",
                    message / 1e9, message * 2 * (tensor_parallel - 1) / tensor_parallel / 1e9);
      }
      fmt::print("\n");
    }

    double bytes_per_second = bandwidth * 1e9;
    std::string link = fmt::format("{} GB/s", bandwidth);
    for (const auto& n : est::networks()) {
      std::string a = n.name, b = network;
      for (auto* s : {&a, &b}) std::transform(s->begin(), s->end(), s->begin(), [](unsigned char c) { return std::tolower(c); });
      if (bandwidth <= 0 && a == b) {
        bytes_per_second = n.bytes_per_second;
        link = fmt::format("{} at {} GB/s", n.name, n.bytes_per_second / 1e9);
      }
    }
    if (bytes_per_second <= 0) throw zero::Error("--network " + network + ": expected 100GbE, NDR or NVLink", "--network");
    fmt::print("\nCommunication per step and rank ({}-byte elements; {}):\n", dtype_bytes, link);
    for (int k : {0, 1, 2, 3}) {
      const double bytes = est::comm_bytes_per_step(params, ranks, k, dtype_bytes);
      fmt::print("{} stage {}: {:>10.3f} GB sent, {:>9.3f} s at full bandwidth\n", k == stage ? ">" : " ", k, bytes / 1e9,
                 bytes / bytes_per_second);
    }

    if (hf) {
      est::EngineLayoutInput in = hf_parameters(*hf, expert_parallel);
      in.world_size = ranks;
      in.dtype_bytes = dtype_bytes;
      print_engine_states(in, stage,
                          "model states of rank 0" + (expert_parallel > 1
                                                          ? fmt::format(" (experts over {} ranks each, dense weights over {})",
                                                                        ranks / expert_parallel, ranks)
                                                          : std::string()));
    }
    if (shape) {
      est::EngineLayoutInput in = gpt_parameters(*shape);
      in.world_size = ranks;
      in.dtype_bytes = dtype_bytes;
      print_engine_states(in, stage, "model states per rank");
      const int64_t rows_per_rank = micro, tokens = seq > 0 ? seq : shape->max_seq;
      const zero::gpt::ActivationBytes a = zero::gpt::gpt_activation_bytes(*shape, rows_per_rank, tokens, 1);
      fmt::print("  activations per rank ({} x {} tokens, fp32 compute): {} GB, {} GB with activation checkpointing{}\n",
                 rows_per_rank, tokens, gib(static_cast<double>(a.without_checkpointing)),
                 gib(static_cast<double>(a.with_checkpointing)), checkpointing ? " (chosen)" : "");
    }
    if (device_memory > 0 || host_memory > 0) {
      fmt::print("\nFits {} GB per device and {} GB per host (DeepSpeed's estimators, zero_init):\n", device_memory,
                 host_memory);
      int fits = 0;
      for (const Row& r : rows) {
        const bool ok = (device_memory <= 0 || r.with_init.device <= device_memory * est::kGiB) &&
                        (host_memory <= 0 || r.with_init.host <= host_memory * est::kGiB);
        if (ok) fmt::print("  {}\n", r.name), ++fits;
      }
      if (fits == 0) fmt::print("  none: more devices, or NVMe offload (ZeRO-Infinity)\n");
    }
    return 0;
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-estimate: {}\n", e.what());
    return 1;
  }
}
