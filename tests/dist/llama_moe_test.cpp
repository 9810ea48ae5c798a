// Mixtures of experts (issue 41): Mixtral and Qwen2-MoE from Hugging Face directories against the
// independent reference (tests/reference/hf_llama.py, written from transformers' eager MoE
// blocks and load_balancing_loss_func). The cases train with the load-balancing loss on
// (router_aux_loss_coef 0.02), which is not a mean over rows: the reference trains each step as
// 4 equal parts, each a forward of its own, and so do data-parallel ranks × micro-batches here
// (1 rank × 4, 2 × 2, 4 × 1). mixtral_moe: 4 experts, top 2 renormalised; qwen2_moe_dense: a dense
// layer between MoE ones (decoder_sparse_step 2), the shared expert, norm_topk_prob off;
// qwen2_moe_norm: mlp_only_layers, norm_topk_prob on, tied embeddings.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "checkpoint/consolidate.h"
#include "checkpoint/parts.h"
#include "checkpoint/safetensors_reader.h"
#include "models/llama/hf_sink.h"
#include "models/llama/hf_model_dir.h"
#include "models/llama/llama.h"
#include "models/llama/llama_moe.h"
#include "models/llama/llama_trainable.h"
#include "tests/dist/dist_test_world.h"
#include "tests/dist/llama_cases.h"
#include "tests/dist/scrape.h"
#include "tests/dist/scratch_dir.h"
#include "zero/comm_stats.h"
#include "zero/engine.h"
#include "zero/estimate.h"
#include "zero/expert_parallel.h"
#include "zero/world.h"

using namespace llama_cases;
using namespace zero::gpt;

namespace {

constexpr int kParts = 4;  // each step's data-parallel ranks x micro-batches, as the reference's

// Ranks that divide the 4 parts of a step: 1, 2 or 4.
bool divides_parts() { return kParts % test_world().size() == 0; }

TrainerOptions moe_options(const std::string& name, int stage, const std::string& optimizer,
                           const std::string& extra = "", int ranks = test_world().size(),
                           const std::string& zero_extra = "") {
  TrainerOptions o = options(name, stage, optimizer, 10);
  o.config_text = config(stage, optimizer,
                         R"("train_micro_batch_size_per_gpu": )" + std::to_string(kRows / kParts) +
                             R"(, "gradient_accumulation_steps": )" + std::to_string(kParts / ranks) +
                             (extra.empty() ? "" : ", " + extra),
                         2000, zero_extra);
  return o;
}

// The expert-parallel sizes above 1 this many ranks divide (4 experts): 2 at 2 ranks, 2 and 4 at 4.
std::vector<int> expert_parallel_sizes() {
  std::vector<int> sizes;
  for (int ep : {2, 4})
    if (ep <= test_world().size() && test_world().size() % ep == 0) sizes.push_back(ep);
  return sizes;
}

// zero-estimate's engine figures for this rank's part of `name` at expert-parallel size `ep`: the
// model built as the trainer builds it (this rank's experts), its parameters in registration order,
// each decoder layer a unit.
zero::estimate::EngineStates estimated(const std::string& name, int stage, int ep, int optimizer_states) {
  const zero::llama::HfModel hf = zero::llama::open_hf_model((cases_dir() / name / "model").string());
  const int place = test_world().rank() % ep;
  zero::llama::LlamaForCausalLM model(hf.config, *zero::llama::file_weights(hf), at::kFloat, {}, {},
                                      {.group = ep > 1 ? &test_world().communicator() : nullptr, .rank = place, .size = ep});
  zero::estimate::EngineLayoutInput in{.stage = stage, .world_size = test_world().size(), .dtype_bytes = 4,
                                       .optimizer_states = optimizer_states, .reduce_bucket_size = 2000};
  for (const auto& item : model.named_parameters()) {
    const std::string& key = item.key();
    in.numels.push_back(item.value().numel());
    const bool in_layer = key.rfind("model.layers.", 0) == 0;
    in.units.push_back(in_layer ? std::stoi(key.substr(13)) : -1);
    in.expert.push_back(key.find(".experts.") != std::string::npos);
  }
  in.expert_parallel = ep;
  return zero::estimate::engine_model_states(in);
}

std::vector<double> grad_norms(const TrainerResult& r) {
  std::vector<double> out;
  for (const auto& step : r.steps) out.push_back(step.grad_norm);
  return out;
}

std::string expert_parallel_block(int ep) {
  return R"("expert_parallel": {"enabled": true, "autoep_size": )" + std::to_string(ep) + "}";
}

}  // namespace

// Every ZeRO stage (each decoder layer, experts and all, one unit at stage 3), SGD and AdamW.
TEST_F(LlamaCases, MoeTrajectoriesFollowTheReference) {
  if (!divides_parts()) GTEST_SKIP() << "1, 2 or 4 ranks";
  std::map<std::string, std::vector<double>> norms;  // EP 1's gradient norms, per Mixtral run
  for (const std::string name : {"mixtral_moe", "qwen2_moe_dense", "qwen2_moe_norm"}) {
    const nlohmann::json want = expected(name);
    for (const std::string optimizer : {"sgd", "adamw"}) {
      for (int stage : {0, 1, 2, 3}) {
        // Mixtral at every stage; the Qwen2-MoE cases at 3 (SGD) and 1 (AdamW).
        if (name != "mixtral_moe" && stage != (optimizer == "sgd" ? 3 : 1)) continue;
        const std::string what = name + ", " + optimizer + ", stage " + std::to_string(stage);
        const TrainerResult r = train_model(moe_options(name, stage, optimizer), test_world(), nullptr);
        expect_reference(losses(r), want[optimizer]["losses"].get<std::vector<double>>(), what);
        if (name == "mixtral_moe") norms[what] = grad_norms(r);
      }
      const auto reference = want[optimizer]["losses"].get<std::vector<double>>();
      EXPECT_LT(reference.back(), reference.front() - 0.1) << name << ": the loss must fall for the test to mean much";
    }
  }
  // Expert parallelism: each rank holds E/EP of each MoE layer's experts, partitioned over its
  // expert-data-parallel group (world ÷ EP ranks), the dense weights over the world; every loss
  // on the same reference trajectory (which is EP 1's).
  for (int ep : expert_parallel_sizes()) {
    for (int stage : {0, 1, 2, 3}) {
      for (const std::string optimizer : {"sgd", "adamw"}) {
        if (optimizer == "adamw" && stage != 2) continue;
        const std::string what = "mixtral_moe EP " + std::to_string(ep) + ", " + optimizer + ", stage " + std::to_string(stage);
        const TrainerResult r = train_model(moe_options("mixtral_moe", stage, optimizer, expert_parallel_block(ep)),
                                            test_world(), nullptr);
        expect_reference(losses(r), expected("mixtral_moe")[optimizer]["losses"].get<std::vector<double>>(), what);
        // The global gradient norm counts every expert once, whoever holds it (at stage 0 each
        // rank holds its experts whole; partitioned, its shard of them).
        const std::vector<double> whole = norms.at("mixtral_moe, " + optimizer + ", stage " + std::to_string(stage));
        const std::vector<double> split = grad_norms(r);
        ASSERT_EQ(split.size(), whole.size()) << what;
        for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(split[i], whole[i], 1e-6 * whole[i]) << what << ", step " << i + 1;
        // Model states per rank, exactly as the formula (zero-estimate's, with the experts
        // partitioned over world ÷ EP ranks and the dense weights over the world).
        const zero::estimate::EngineStates formula = estimated("mixtral_moe", stage, ep, optimizer == "sgd" ? 0 : 2);
        EXPECT_EQ(r.memory.parameters - r.memory.gather_buffers, formula.parameters) << what;
        EXPECT_EQ(r.memory.gradients, formula.gradients) << what;
        EXPECT_EQ(r.memory.master_weights, formula.master_weights) << what;
        EXPECT_EQ(r.memory.optimizer_state, formula.optimizer_state) << what;
        EXPECT_GT(formula.experts.total(), 0) << what;
        // The experts' part of each, as the engine holds it (MemoryReport::experts).
        EXPECT_EQ(r.memory.experts.parameters, formula.experts.parameters) << what;
        EXPECT_EQ(r.memory.experts.gradients, formula.experts.gradients) << what;
        EXPECT_EQ(r.memory.experts.master_weights, formula.experts.master_weights) << what;
        EXPECT_EQ(r.memory.experts.optimizer_state, formula.experts.optimizer_state) << what;
        // The exchange is counted: 4 all-to-alls per MoE layer and micro-step (2 layers).
        EXPECT_EQ(r.expert_parallel_all_to_all.calls, 10 * (kParts / test_world().size()) * 2 * 4) << what;
        EXPECT_GT(r.expert_parallel_all_to_all.bus_bytes, 0) << what;
      }
    }
    // Offloaded as dense models are: the optimizer's states in CPU memory at stage 2, on NVMe at
    // stage 3 with the parameters' shards in CPU memory (the expert buckets' shards stream through
    // the swap files beside the dense ones).
    const ScratchDir swap("zerocpp_moe_swap");
    const std::string swap_dir = swap.root.string();
    for (const auto& [stage, offload] :
         {std::pair<int, std::string>{2, R"("offload_optimizer": {"device": "cpu"})"},
          {3, R"("offload_optimizer": {"device": "nvme", "nvme_path": ")" + swap_dir +
                  R"("}, "offload_param": {"device": "cpu"})"}}) {
      const std::string what = "mixtral_moe EP " + std::to_string(ep) + ", adamw, stage " + std::to_string(stage) + ", offloaded";
      const TrainerResult r = train_model(
          moe_options("mixtral_moe", stage, "adamw", expert_parallel_block(ep), test_world().size(), offload),
          test_world(), nullptr);
      expect_reference(losses(r), expected("mixtral_moe")["adamw"]["losses"].get<std::vector<double>>(), what);
    }
    // Qwen2-MoE: the shared expert and the router stay dense, a dense layer between MoE ones.
    for (const auto& [name, stage] : {std::pair<std::string, int>{"qwen2_moe_dense", 3}, {"qwen2_moe_norm", 1}}) {
      const TrainerResult r =
          train_model(moe_options(name, stage, "sgd", expert_parallel_block(ep)), test_world(), nullptr);
      expect_reference(losses(r), expected(name)["sgd"]["losses"].get<std::vector<double>>(),
                       name + " EP " + std::to_string(ep) + ", stage " + std::to_string(stage));
    }
  }
  // With every layer checkpointed: a layer's first run has no graph, and the load-balancing
  // term's gradient reaches its router when it runs again in backward.
  const nlohmann::json want = expected("mixtral_moe");
  for (const auto& [stage, optimizer] : {std::pair<int, std::string>{3, "sgd"}, {1, "adamw"}}) {
    TrainerOptions o = moe_options("mixtral_moe", stage, optimizer);
    o.checkpoint_every = 1;
    expect_reference(losses(train_model(o, test_world(), nullptr)), want[optimizer]["losses"].get<std::vector<double>>(),
                     "mixtral_moe checkpointed, " + optimizer + ", stage " + std::to_string(stage));
  }
}

// moe_routed's routers send tokens below 48 to experts 0 and 1 and the others to 2 and 3, by a
// wide margin. On low.bin (tokens below 48 only) experts 2 and 3 of both layers get no token on
// any rank; on halves.bin each quarter of a step is all low or all high, so at 2 and 4 ranks
// two experts are idle on half of the ranks and busy on the others (at 1 rank, in half of the
// micro-batches). At stage 3 with overlap_comm and prefetching, both runs complete on the
// reference's trajectory; with low.bin SGD leaves the idle experts' weights bit for bit as loaded
// — their gradients were exactly zero — while the chosen ones move.
TEST_F(LlamaCases, MoeIdleExpertsNeverHangAndGetZeroGradients) {
  if (!divides_parts()) GTEST_SKIP() << "1, 2 or 4 ranks";
  const nlohmann::json want = expected("moe_routed", "expected_routed.json");
  for (const std::string data : {"halves", "low"}) {
    Scratch scratch;
    TrainerOptions o = moe_options("moe_routed", 3, "sgd");  // (config(): overlap_comm, prefetching by default)
    o.train_data = (cases_dir() / (data + ".bin")).string();
    o.export_path = (scratch.root / "exported").string();
    const TrainerResult r = train_model(o, test_world(), nullptr);
    expect_reference(losses(r), want[data]["losses"].get<std::vector<double>>(), "moe_routed on " + data + ".bin");
    // The load, exactly: 10 steps of 12 rows of 16 tokens, each token to two experts of each
    // layer — the lower half's to 0 and 1 (all of low.bin; half of halves.bin's), the rest to 2 and 3.
    const int64_t tokens = 10 * kRows * kSeq;
    const std::vector<int64_t> load =
        data == "low" ? std::vector<int64_t>{tokens, tokens, 0, 0} : std::vector<int64_t>(4, tokens / 2);
    EXPECT_EQ(r.tokens_per_expert, (std::vector<std::vector<int64_t>>{load, load})) << data;
    // Expert parallelism: at EP 4 on low.bin two ranks hold only idle experts, and every rank
    // exchanges no row with them in either direction.
    for (int ep : expert_parallel_sizes()) {
      TrainerOptions split = moe_options("moe_routed", 3, "sgd", expert_parallel_block(ep));
      split.train_data = o.train_data;
      split.export_path = (scratch.root / ("exported_ep" + std::to_string(ep))).string();
      const TrainerResult with_ep = train_model(split, test_world(), nullptr);
      expect_reference(losses(with_ep), want[data]["losses"].get<std::vector<double>>(),
                       "moe_routed on " + data + ".bin at EP " + std::to_string(ep));
      EXPECT_EQ(with_ep.tokens_per_expert, (std::vector<std::vector<int64_t>>{load, load})) << data << " EP " << ep;
      test_world().communicator().barrier({.async = false});
      // The same weights as without expert parallelism, to the float's last bits or nearly.
      const zero::checkpoint::SafetensorsModel whole(o.export_path), split_weights(split.export_path);
      for (const auto& tensor : whole.names()) {
        const auto a = whole.find(tensor), b = split_weights.find(tensor);
        ASSERT_TRUE(b.file) << tensor << " not exported at EP " << ep;
        const auto* x = reinterpret_cast<const float*>(a.file->data(*a.tensor));
        const auto* y = reinterpret_cast<const float*>(b.file->data(*b.tensor));
        const size_t n = (a.tensor->end - a.tensor->begin) / sizeof(float);
        double worst = 0;
        for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
        EXPECT_LE(worst, 1e-5) << tensor << " at EP " << ep;
        // Idle experts (low.bin: 2 and 3, held by other ranks than the busy ones at EP 2) come out
        // bit for bit as loaded: their gradients were exactly zero.
        const bool idle = data == "low" && (tensor.find(".experts.2.") != std::string::npos ||
                                            tensor.find(".experts.3.") != std::string::npos);
        if (idle) {
          const zero::checkpoint::SafetensorsModel loaded((cases_dir() / "moe_routed" / "model").string());
          const auto l = loaded.find(tensor);
          EXPECT_EQ(std::memcmp(l.file->data(*l.tensor), y, n * sizeof(float)), 0) << tensor << " moved at EP " << ep;
        }
      }
      test_world().communicator().barrier({.async = false});
    }
    test_world().communicator().barrier({.async = false});
    if (data != "low") continue;
    const zero::checkpoint::SafetensorsModel before((cases_dir() / "moe_routed" / "model").string()),
        after(o.export_path);
    for (int layer : {0, 1}) {
      for (int expert : {0, 1, 2, 3}) {
        for (const char* w : {"w1", "w3"}) {  // (w2's row 0 is zero by construction)
          const std::string name = "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." +
                                   std::to_string(expert) + "." + w + ".weight";
          const auto a = before.find(name), b = after.find(name);
          ASSERT_TRUE(a.file && b.file) << name;
          const uint64_t bytes = a.tensor->end - a.tensor->begin;
          ASSERT_EQ(bytes, b.tensor->end - b.tensor->begin) << name;
          const bool same = std::memcmp(a.file->data(*a.tensor), b.file->data(*b.tensor), bytes) == 0;
          if (expert >= 2) {
            EXPECT_TRUE(same) << name << ": an expert no token chose moved";
          } else {
            EXPECT_FALSE(same) << name << ": a chosen expert did not train";
          }
        }
      }
    }
    test_world().communicator().barrier({.async = false});
  }
}

// Mixtral's experts as the hub stores them (block_sparse_moe.experts.N.w1/w2/w3, in 3 shards) and
// Qwen2-MoE's (mlp.experts.N.gate_proj/..., the shared expert and its gate), loaded and exported
// back: the input's tensors bit for bit.
TEST_F(LlamaCases, MoeLoadThenExportIsBitwise) {
  if (test_world().size() > 2) GTEST_SKIP() << "at 1 and 2 ranks";
  for (const std::string name : {"mixtral_moe", "qwen2_moe_dense"}) {
    // With expert parallelism each rank holds half of the experts: the export gathers them.
    for (int ep : {1, test_world().size()}) {
      if (ep == 2 && name != "mixtral_moe") continue;
      Scratch scratch;
      TrainerOptions o = moe_options(name, 3, "sgd", ep > 1 ? expert_parallel_block(ep) : "");
      o.steps = 0;
      o.export_path = (scratch.root / "exported").string();
      train_model(o, test_world(), nullptr);
      test_world().communicator().barrier({.async = false});
      expect_same_weights((cases_dir() / name / "model").string(), o.export_path, name + " EP " + std::to_string(ep));
      test_world().communicator().barrier({.async = false});
    }
  }
}

// What is not built yet is refused by name.
TEST_F(LlamaCases, MoeRefusalsNameTheKey) {
  if (test_world().size() != 2) GTEST_SKIP() << "at 2 ranks";
  TrainerOptions sliced = options("mixtral_moe", 1, "sgd", 10);
  sliced.config_text = config(1, "sgd", R"("tensor_parallel": {"autotp_size": 2})");
  EXPECT_NE(refusal(sliced).find("tensor parallelism with Mixtral's experts is not built yet"), std::string::npos);
  // DeepSpeed's expert_parallel block, checked against the model.
  const auto expert_parallel = [](const std::string& name, const std::string& block) {
    return refusal(moe_options(name, 2, "sgd", R"("expert_parallel": )" + block));
  };
  EXPECT_NE(expert_parallel("mixtral_moe", R"({"enabled": true, "autoep_size": 3})")
                .find("expert_parallel.autoep_size: 3 does not divide the 2 data-parallel ranks"),
            std::string::npos);
  EXPECT_NE(expert_parallel("mixtral_moe", R"({"enabled": true, "preset_model": "qwen2_moe"})")
                .find("preset_model is \"qwen2_moe\" but the model's config.json says model_type \"mixtral\""),
            std::string::npos);
  EXPECT_NE(expert_parallel("llama_gqa", R"({"enabled": true})").find("LlamaForCausalLM has no experts"), std::string::npos);
  EXPECT_EQ(expert_parallel("qwen2_moe_norm", R"({"enabled": true, "autoep_size": 1, "preset_model": "qwen3_moe"})"), "")
      << "EP 1: every expert on every rank, as DeepSpeed";
}

// Expert parallelism's exchange inside the layer (zero/expert_parallel.h), without the engine: at 2
// and 4 ranks, each rank holding 4/n of mixtral_moe's experts, a forward and backward on each
// rank's own rows gives the loss (the load-balancing loss included) the whole model gives on them,
// the same gradient for every weight every rank holds (router, attention, norms, embedding,
// lm_head), and for each expert the sum over the ranks of the whole model's gradients for it.
TEST_F(LlamaCases, ExpertParallelLayersEqualTheWholeModel) {
  const int n = test_world().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "at 2 and 4 ranks";
  const zero::llama::HfModel hf = zero::llama::open_hf_model((cases_dir() / "mixtral_moe" / "model").string());
  zero::llama::LlamaForCausalLM whole(hf.config, *zero::llama::file_weights(hf));
  // The exchange's collectives counted (as zero-train counts them: docs/moe.md).
  auto stats = std::make_shared<zero::CommStats>();
  zero::CountingCommunicator exchange(test_world().communicator(), stats);
  zero::llama::LlamaForCausalLM split(hf.config, *zero::llama::file_weights(hf), at::kFloat, {}, {},
                                      {.group = &exchange, .rank = test_world().rank(), .size = n});
  torch::manual_seed(static_cast<uint64_t>(test_world().rank()) + 1);  // each rank its own rows
  const at::Tensor tokens = torch::randint(0, hf.config.vocab_size, {3, kSeq + 1}, torch::kLong);
  const at::Tensor x = tokens.narrow(1, 0, kSeq), y = tokens.narrow(1, 1, kSeq);
  const at::Tensor whole_loss = whole.loss(x, y);
  const int64_t crossed_before = test_world().communicator().inter_node_bytes();
  const at::Tensor split_loss = split.loss(x, y);
  EXPECT_NEAR(split_loss.item<double>(), whole_loss.item<double>(), 1e-6);
  whole_loss.backward();
  split_loss.backward();
  const int64_t crossed = test_world().communicator().inter_node_bytes() - crossed_before;
  const auto whole_params = whole.named_parameters();
  int experts_seen = 0;
  for (const auto& item : whole_params) {
    at::Tensor expected = item.value().grad().defined() ? item.value().grad().clone() : torch::zeros_like(item.value());
    const bool expert = item.key().find(".experts.") != std::string::npos;
    if (expert) test_world().communicator().all_reduce(expected, zero::ReduceOp::kSum, {.async = false});
    const at::Tensor* mine = split.named_parameters().find(item.key());
    if (!mine) {
      EXPECT_TRUE(expert) << item.key() << ": only experts live on some ranks";
      continue;
    }
    experts_seen += expert ? 1 : 0;
    ASSERT_TRUE(mine->grad().defined()) << item.key();
    EXPECT_LE((mine->grad() - expected).abs().max().item<double>(), 1e-6 * (1 + expected.abs().max().item<double>()))
        << item.key();
  }
  EXPECT_EQ(experts_seen, 2 /*layers*/ * 3 /*w1 w2 w3*/ * (4 / n)) << "this rank's share of the experts";
  // The bytes, exactly: per MoE layer the rows this rank routes to other ranks' experts (A) go
  // out and come back (B: the rows the others route to its experts, returned), in forward and
  // again in backward: 2 (A + B) rows of hidden_size floats to other ranks; MPI_Alltoallv sends
  // nothing else (no padding).
  // Across nodes (ctest dist_llama_np4_two_nodes: ranks {0, 1} and {2, 3}) only the rows to and
  // from the other node's ranks cross, and each layer's forward all-gathers the counts (4 experts'
  // int64) from the other node's ranks.
  const int me = test_world().rank(), mine = 4 / n, first = me * mine;
  int64_t rows = 0, rows_across = 0;
  for (const auto& layer : split.model->layers) {
    const at::Tensor counts = layer->block->moe->tokens_per_expert.contiguous();  // this rank's tokens per expert
    const at::Tensor all = zero::expert_parallel::all_gather_counts(test_world().communicator(), counts);  // [ranks, experts]
    for (int64_t e = 0; e < 4; ++e) {
      const int owner = static_cast<int>(e / mine);
      const bool across = test_world().node_of(owner) != test_world().node();
      if (owner != me) {  // A: out to the expert's rank
        rows += counts[e].item<int64_t>();
        rows_across += across ? counts[e].item<int64_t>() : 0;
      }
      for (int r = 0; r < n; ++r) {
        if (owner != me || r == me) continue;
        rows += all[r][e].item<int64_t>();  // B: in from rank r, sent back
        rows_across += test_world().node_of(r) != test_world().node() ? all[r][e].item<int64_t>() : 0;
      }
    }
  }
  EXPECT_GT(rows, 0);
  EXPECT_EQ(stats->total(zero::CollectiveOp::kAllToAll).bus_bytes, static_cast<double>(2 * rows * hf.config.hidden_size * 4));
  EXPECT_EQ(stats->total(zero::CollectiveOp::kAllToAll).calls, 2 /*layers*/ * 4);
  if (test_world().num_nodes() > 1) {
    ASSERT_EQ(n % test_world().local_size(), 0) << "equal nodes";
    EXPECT_GT(rows_across, 0);
    // (An all-gather across equal nodes sends each chunk once to each other node.)
    EXPECT_EQ(crossed, 2 * rows_across * hf.config.hidden_size * 4 + 2 /*layers*/ * (test_world().num_nodes() - 1) * 4 * 8);
  }
}

// Checkpoints with expert parallelism name every expert as the whole model does (each rank writes
// its shards of its experts; the manifest lists every rank's), so they resume at any layout: saved
// at EP 2 on 4 ranks (stage 2, AdamW: the moments come back too), resumed at EP 4 on the 4 ranks,
// and at EP 1 and EP 2 on 2 ranks (each half of the job a world of its own, with its own copy):
// the next losses are the unbroken run's. zero-ckpt consolidate --format hf of it is the export of
// the same weights, bit for bit.
TEST_F(LlamaCases, ExpertParallelCheckpointsResumeAtAnyLayout) {
  if (test_world().size() != 4) GTEST_SKIP() << "at 4 ranks";
  Scratch scratch;
  const std::string saved = (scratch.root / "saved").string();
  TrainerOptions first = moe_options("mixtral_moe", 2, "adamw", expert_parallel_block(2));
  const std::vector<double> unbroken = losses(train_model(first, test_world(), nullptr));
  first.steps = 4;
  first.save_dir = saved;
  first.export_path = (scratch.root / "exported").string();
  train_model(first, test_world(), nullptr);
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() == 0) {
    [&] {  // (a failed assertion leaves the lambda, not the test: the other ranks wait below)
      const std::string consolidated = (scratch.root / "consolidated").string();
      zero::checkpoint::StagedCheckpoint reader(saved);
      zero::checkpoint::consolidate(reader, *zero::llama::hf_sink(consolidated, "", 0));
      expect_same_weights(first.export_path, consolidated, "consolidated at EP 2");
    }();
  }
  const auto resume = [&](int ep, zero::World& world, const std::string& copy) {
    world.communicator().barrier({.async = false});
    if (world.rank() == 0) std::filesystem::copy(saved, copy, std::filesystem::copy_options::recursive);
    world.communicator().barrier({.async = false});
    TrainerOptions next = moe_options("mixtral_moe", 2, "adamw", ep > 1 ? expert_parallel_block(ep) : "", world.size());
    next.save_dir = copy;
    next.resume = true;
    const std::vector<double> resumed = losses(train_model(next, world, nullptr));
    ASSERT_EQ(resumed.size(), 6u) << "steps 5 to 10";
    for (size_t i = 0; i < resumed.size(); ++i)
      EXPECT_NEAR(resumed[i], unbroken[i + 4], 1e-6)
          << "saved at EP 2 on 4 ranks, resumed at EP " << ep << " on " << world.size() << " ranks, step " << i + 5;
  };
  resume(4, test_world(), (scratch.root / "resume_ep4").string());
  zero::World half = test_world().split(test_world().rank() / 2);
  for (int ep : {1, 2}) {
    resume(ep, half, (scratch.root / ("resume_ep" + std::to_string(ep) + "_half" + std::to_string(test_world().rank() / 2))).string());
  }
  test_world().communicator().barrier({.async = false});
}

// What an operator watches of a MoE step (wall_clock_breakdown, comms logger, Prometheus) at EP 2
// on 2 ranks, stage 2: the MoE layers' forward time by part and the exchange's all-to-all time;
// on the endpoint each layer's tokens per expert in the last step — this rank's routed pairs,
// 16 tokens × top 2 per layer — and its busiest expert over the mean, the exchange's bytes
// (exactly what it counted) and its time.
TEST_F(LlamaCases, MoeStepIsObserved) {
  if (test_world().size() != 2) GTEST_SKIP() << "at 2 ranks";
  const int base_port = scrape::shared_base_port();
  zero::Config config = zero::Config::parse(
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": true,
          "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "wall_clock_breakdown": true,
          "comms_logger": {"enabled": true}, "expert_parallel": {"enabled": true, "autoep_size": 2},
          "prometheus": {"enabled": true, "host": "127.0.0.1", "port": )" + std::to_string(base_port) + "}}");
  config.resolve({.world_size = test_world().size()});
  const zero::llama::HfModel hf = zero::llama::open_hf_model((cases_dir() / "mixtral_moe" / "model").string());
  const auto model = zero::llama::make_llama(hf, config, test_world());
  const zero::ModelParallelOptions layers = model->model_parallel();
  ASSERT_TRUE(layers.expert_step && layers.expert_stats);
  zero::Engine engine(model->module(), config, test_world(), {}, layers);
  torch::manual_seed(static_cast<uint64_t>(test_world().rank()) + 1);
  const at::Tensor tokens = torch::randint(0, hf.config.vocab_size, {1, kSeq + 1}, torch::kLong);
  std::vector<zero::models::TrainableModel::ExpertLoad> before;
  for (int step = 0; step < 3; ++step) {
    if (step == 2) before = model->tokens_per_expert();
    const at::Tensor loss = engine.forward([&] { return model->loss(tokens.narrow(1, 0, kSeq), tokens.narrow(1, 1, kSeq)); });
    engine.backward(loss);
    engine.step();
  }
  const zero::StepBreakdown b = engine.last_step_breakdown();
  for (double part : {b.moe_router, b.moe_dispatch, b.moe_experts, b.moe_combine, b.expert_all_to_all}) EXPECT_GT(part, 0);
  EXPECT_LT(b.moe_router + b.moe_dispatch + b.moe_experts + b.moe_combine, b.forward + b.backward);
  EXPECT_NE(engine.comms_summary().find("expert-parallel"), std::string::npos) << engine.comms_summary();

  const std::string text = scrape::metrics(base_port + test_world().local_rank());
  const std::string labels = "{rank=\"" + std::to_string(test_world().rank()) + "\",job_name=\"zerocpp\"";
  const std::vector<zero::models::TrainableModel::ExpertLoad> after = model->tokens_per_expert();
  ASSERT_EQ(after.size(), 2u);
  for (size_t l = 0; l < after.size(); ++l) {
    const std::string layer = ",layer=\"" + std::to_string(after[l].layer) + "\"";
    int64_t sum = 0, busiest = 0;
    for (size_t e = 0; e < after[l].tokens.size(); ++e) {
      const int64_t step_tokens = after[l].tokens[e] - before[l].tokens[e];
      const std::string value = scrape::series_value(
          text, "deepspeed:moe_tokens_per_expert" + labels + layer + ",expert=\"" + std::to_string(e) + "\"}");
      ASSERT_FALSE(value.empty()) << text;
      EXPECT_EQ(std::stod(value), static_cast<double>(step_tokens)) << "layer " << l << " expert " << e;
      sum += step_tokens;
      busiest = std::max(busiest, step_tokens);
    }
    EXPECT_EQ(sum, kSeq * 2) << "each token's top 2";
    const std::string imbalance = scrape::series_value(text, "deepspeed:moe_load_imbalance" + labels + layer + "}");
    ASSERT_FALSE(imbalance.empty()) << text;
    EXPECT_NEAR(std::stod(imbalance), static_cast<double>(busiest) / (static_cast<double>(sum) / 4), 1e-9);
  }
  const std::string sent = scrape::series_value(
      text, "deepspeed:collective_bytes_total" + labels + ",op=\"all_to_all\",group=\"expert_parallel\"}");
  ASSERT_FALSE(sent.empty()) << text;
  const double exchanged = layers.expert_stats->total(zero::CollectiveOp::kAllToAll).bus_bytes;
  EXPECT_GT(exchanged, 0);
  EXPECT_EQ(std::stod(sent), exchanged);
  const std::string all_to_all = scrape::series_value(text, "deepspeed:moe_seconds" + labels + ",part=\"all_to_all\"}");
  ASSERT_FALSE(all_to_all.empty()) << text;
  EXPECT_NEAR(std::stod(all_to_all), b.expert_all_to_all, 1e-9 + 1e-6 * b.expert_all_to_all);
}
