#include "zero/estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "layout/bucket_layout.h"
#include "zero/error.h"

namespace zero::estimate {

PaperStates zero_paper(double params, int devices, double k) {
  const double n = devices;
  return {.baseline = (2 + 2 + k) * params,
          .os = 4 * params + k * params / n,
          .os_g = 2 * params + (2 + k) * params / n,
          .os_g_p = (4 + k) * params / n};
}

HostDevice deepspeed_zero2(double params, int devices_per_node, int nodes, bool cpu_offload, double buffer_factor) {
  const double devices = static_cast<double>(devices_per_node) * nodes;
  if (cpu_offload) {
    return {.host = params * std::max(4 * devices, 16.0) * buffer_factor, .device = 2 * params};
  }
  // 2Ψ of 16-bit parameters; 18Ψ/G: 16-bit and fp32 gradients, fp32 master, Adam's two moments.
  return {.host = params * 4 * devices_per_node * buffer_factor,
          .device = 2 * params + std::floor(18 * params / devices)};
}

HostDevice deepspeed_zero3(double params, double largest_layer, int devices_per_node, int nodes,
                           bool offload_optimizer, bool offload_params, bool zero_init, double buffer_factor) {
  const double devices = static_cast<double>(devices_per_node) * nodes, per_node = 1.0 / nodes;
  const double largest = 4 * largest_layer;  // one layer gathered, in fp32 as DeepSpeed counts it
  const double whole_model_per_rank = params * 4 * devices_per_node;  // every rank builds the model without zero_init
  if (offload_optimizer && offload_params) {
    const double host = zero_init ? params * 18 * per_node : std::max(whole_model_per_rank, params * 18 * per_node);
    return {.host = host * buffer_factor, .device = largest};
  }
  if (offload_optimizer) {
    const double host = zero_init ? params * 16 * per_node : std::max(whole_model_per_rank, params * 16 * per_node);
    return {.host = host * buffer_factor, .device = largest + std::floor(2 * params / devices)};
  }
  return {.host = (zero_init ? largest_layer * 4 * devices_per_node : whole_model_per_rank) * buffer_factor,
          .device = largest + std::floor(18 * params / devices)};
}

double comm_bytes_per_step(double params, int ranks, int stage, double bytes_per_element) {
  const double share = static_cast<double>(ranks - 1) / ranks;
  return (stage == 3 ? 3.0 : 2.0) * params * share * bytes_per_element;
}

std::vector<Network> networks() {
  return {{"100GbE", 12.5e9}, {"NDR", 50e9}, {"NVLink", 450e9}};
}

EngineStates engine_model_states(const EngineLayoutInput& in) {
  const bool stage3 = in.stage == 3;
  const int partitions = in.stage == 0 ? 1 : in.world_size;
  const int64_t alignment = 32 / in.dtype_bytes;  // the engine's: 32 bytes of the model's dtype
  const int n = static_cast<int>(in.numels.size());
  // At stage 3 a bucket per unit and one for the root (its group: after every unit), whatever the
  // bucket size; with expert parallelism the experts are replica group 1.
  std::vector<int> groups;
  int root = 0;
  if (stage3) {
    for (int u : in.units) root = std::max(root, u + 1);
    for (int i = 0; i < n; ++i) {
      const int u = in.units.empty() ? -1 : in.units[static_cast<size_t>(i)];
      groups.push_back(u < 0 ? root : u);
    }
  }
  layout::ReplicaGroups replicas;
  if (in.expert_parallel > 1 && !in.expert.empty()) {
    for (int i = 0; i < n; ++i) replicas.of_param.push_back(in.expert[static_cast<size_t>(i)] ? 1 : 0);
    replicas.partitions = {partitions, in.stage == 0 ? 1 : in.world_size / in.expert_parallel};
  }
  const std::vector<int> order = layout::backward_order(static_cast<size_t>(n), groups, replicas.of_param);
  const layout::BucketLayout layout(in.numels, partitions, alignment,
                                    stage3 ? INT64_MAX : std::max<int64_t>(1, in.reduce_bucket_size), order, groups,
                                    replicas);
  const int64_t d = in.dtype_bytes;
  EngineStates s;
  s.padding_elements = layout.padding();
  // fp32 master of the owned shards, except where it is the parameters themselves: one partition
  // of an fp32 model laid out whole (not stage 3's units), and stage 3's fp32 unit shards.
  const bool master_is_params = !layout.partitioned() && d == 4 && !stage3;
  int64_t largest_unit = 0;
  for (const auto& bucket : layout.buckets()) {
    const bool is_root = stage3 && groups[static_cast<size_t>(bucket.params.front())] == root;
    if (stage3 && !is_root) largest_unit = std::max(largest_unit, bucket.padded);
    ModelStates b;
    // Stage 3 keeps the root whole and only its shard of each unit.
    b.parameters = (stage3 && !is_root ? bucket.shard : bucket.padded) * d;
    // Stages 0/1 keep whole gradients in the model's dtype; 2/3 an fp32 accumulator of their shards.
    b.gradients = in.stage < 2 ? bucket.padded * d : bucket.shard * 4;
    b.master_weights = master_is_params || (stage3 && d == 4 && !is_root) ? 0 : bucket.shard * 4;
    b.optimizer_state = static_cast<int64_t>(in.optimizer_states) * bucket.shard * 4;
    for (ModelStates* into : {static_cast<ModelStates*>(&s), bucket.replica_group == 1 ? &s.experts : nullptr}) {
      if (!into) continue;
      into->parameters += b.parameters;
      into->gradients += b.gradients;
      into->master_weights += b.master_weights;
      into->optimizer_state += b.optimizer_state;
    }
  }
  s.largest_unit_bytes = stage3 ? largest_unit * d : 0;
  return s;
}

double parse_count(const std::string& text, const std::string& what) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix == "K") value *= 1e3;
  else if (suffix == "M") value *= 1e6;
  else if (suffix == "B" || suffix == "G") value *= 1e9;
  else if (suffix == "T") value *= 1e12;
  else if (!suffix.empty() || end == text.c_str()) value = -1;
  if (!(value > 0)) throw Error(what + " " + text + ": expected a positive count such as 7.5B, 2851M or 32000", what);
  return value;
}

}  // namespace zero::estimate
