// zero::estimate — what a ZeRO job needs before it starts: model-state memory per device and per
// host for every stage and offload option, the communication of a step, and what fits. The
// library behind `zero-estimate` (docs/observability.md). Torch-free; every figure is in bytes.
//
// Three estimates, for three questions:
// - zero_paper(): the ZeRO paper's model-state formula (Rajbhandari et al. 2020, §3 and Table 1),
//   mixed precision with K bytes of optimizer state per parameter (K = 12 for Adam).
// - deepspeed_zero2() / deepspeed_zero3(): DeepSpeed's own estimators
//   (estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs), the same
//   arithmetic, including the host-side buffer factor. Note: DeepSpeed's documented t5-3b table
//   gives 15.93 GB per device for ZeRO-2 without offload, from an older formula (4Ψ + 16Ψ/G); its
//   code now computes 2Ψ + 18Ψ/G (11.28 GB there). We follow the code.
// - engine_model_states(): what zerocpp's engine holds (Engine::memory_report()) for a model's
//   parameter sizes, padding included, exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::estimate {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // DeepSpeed's "GB"

// Per device, bytes: baseline (2 + 2 + K)Ψ, P_os 4Ψ + KΨ/N, P_os+g 2Ψ + (2 + K)Ψ/N,
// P_os+g+p (4 + K)Ψ/N.
struct PaperStates {
  double baseline = 0, os = 0, os_g = 0, os_g_p = 0;
};
PaperStates zero_paper(double params, int devices, double k = 12);

struct HostDevice {
  double host = 0, device = 0;  // bytes per host (node) and per device
};
// ZeRO-2, with or without the optimizer offloaded to the CPU.
HostDevice deepspeed_zero2(double params, int devices_per_node, int nodes, bool cpu_offload,
                           double buffer_factor = 1.5);
// ZeRO-3: offload_params implies the optimizer offloaded too (DeepSpeed's table rows).
HostDevice deepspeed_zero3(double params, double largest_layer, int devices_per_node, int nodes,
                           bool offload_optimizer, bool offload_params, bool zero_init, double buffer_factor = 1.5);

// Bytes each rank sends per optimizer step (DESIGN §6; nccl-tests' bus bytes): stages 0-2
// 2Ψ(N-1)/N (an all-reduce, or a reduce-scatter and an all-gather), stage 3 3Ψ(N-1)/N (the
// forward and backward gathers and the reduce-scatter), Ψ in elements of `bytes_per_element`.
double comm_bytes_per_step(double params, int ranks, int stage, double bytes_per_element);

struct Network {
  std::string name;
  double bytes_per_second;  // per rank and direction
};
// 100GbE (12.5 GB/s), InfiniBand NDR (400 Gb/s: 50 GB/s), NVLink 4 on an H100 (450 GB/s per
// direction). Name matching is case-insensitive; empty when unknown.
std::vector<Network> networks();

// zerocpp's engine: what memory_report() holds for a model, by category, for a run without
// offload. `numels` are the trainable parameters in registration order; `units` (stage 3) gives
// each parameter its zero::Unit index, or -1 for the root (parameters outside every unit, and
// those kept whole by the persistence thresholds); empty: no units.
struct EngineLayoutInput {
  std::vector<int64_t> numels;
  std::vector<int> units;
  int stage = 2;
  int world_size = 1;
  int dtype_bytes = 4;             // the model's: 4 fp32, 2 bf16/fp16
  int optimizer_states = 2;        // fp32 floats per element: Adam(W) 2, SGD with momentum 1, ...
  int64_t reduce_bucket_size = 500'000'000;
  // Expert parallelism (docs/moe.md): which parameters are experts' (empty: none), and the
  // expert-parallel size: experts are partitioned over world_size ÷ expert_parallel ranks.
  // `numels` are then this rank's parameters (its share of the experts).
  std::vector<bool> expert;
  int expert_parallel = 1;
};
struct ModelStates {
  int64_t parameters = 0;  // stage 3: the root whole and the units' shards (gather buffers apart)
  int64_t gradients = 0;
  int64_t master_weights = 0;
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + gradients + master_weights + optimizer_state; }
};
struct EngineStates : ModelStates {
  int64_t padding_elements = 0;
  int64_t largest_unit_bytes = 0;  // stage 3: one unit whole (what a gather buffer holds)
  ModelStates experts;             // of the above, the experts' (expert parallelism); the rest is dense
};
EngineStates engine_model_states(const EngineLayoutInput& input);

// "7.5B", "2851M", "32k", "1e9", "123456" -> a count. Throws zero::Error naming `what`.
double parse_count(const std::string& text, const std::string& what);

}  // namespace zero::estimate
