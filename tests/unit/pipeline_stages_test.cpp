// Which layers each pipeline stage holds (models/common/pipeline_stages.h), by DeepSpeed's three
// partition methods, on the Llama family's layer lists.
#include <gtest/gtest.h>

#include "models/common/pipeline_stages.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_trainable.h"
#include "zero/error.h"

using zero::pipeline::Item;
using zero::pipeline::partition_stages;

namespace {

// A Llama of `layers` layers (hidden 64, 4 heads, vocabulary 1000): its embedding and head each
// weigh 64 000 parameters, a decoder layer 4·64² + 3·64·112 + 2·64 = 37 888.
std::vector<Item> stage_items(int layers) {
  return zero::llama::pipeline_items(zero::llama::parse_llama_config(
      {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
       {"intermediate_size", 112}, {"num_hidden_layers", layers}, {"num_attention_heads", 4},
       {"num_key_value_heads", 4}, {"vocab_size", 1000}, {"max_position_embeddings", 64}},
      "test"));
}

}  // namespace

TEST(PipelineStages, UniformBalancesDecoderLayersTheEarlierStagesTakingMore) {
  // 5 layers on 2 stages: the embedding and 3 layers, then 2 layers and the head.
  EXPECT_EQ(partition_stages(stage_items(5), 2, "uniform"), (std::vector<int>{0, 4, 7}));
  EXPECT_EQ(partition_stages(stage_items(8), 4, "uniform"), (std::vector<int>{0, 3, 5, 7, 10}));
  // type: a case-insensitive search in the layers' types, here the decoder layers: as uniform.
  EXPECT_EQ(partition_stages(stage_items(5), 2, "type:decoderlayer"), (std::vector<int>{0, 4, 7}));
  EXPECT_EQ(stage_items(1)[1].type, "LlamaDecoderLayer");
}

TEST(PipelineStages, ParametersCountTheEmbeddingAndTheHead) {
  // 4 layers of 37 888 and two ends of 64 000 (+64: the final norm) on 2 stages: by parameters
  // the ends weigh like 1.7 layers each, so each stage takes 2 layers (101 888 + 75 776 a side).
  const std::vector<Item> items = stage_items(4);
  EXPECT_EQ(items.front().parameters, 64000);
  EXPECT_EQ(items[1].parameters, 4 * 64 * 64 + 3 * 64 * 112 + 2 * 64);
  EXPECT_EQ(items.back().parameters, 64000 + 64);
  EXPECT_EQ(partition_stages(items, 2, "parameters"), (std::vector<int>{0, 3, 6}));
  // 4 stages of a 2-layer model: one item each.
  EXPECT_EQ(partition_stages(stage_items(2), 4, "parameters"), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(PipelineStages, RefusalsNameTheKeyAndTheNumbers) {
  try {
    partition_stages(stage_items(2), 5, "parameters");
    FAIL() << "5 stages of 4 items";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 pipeline stages for a model of 4 layers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(partition_stages(stage_items(2), 2, "type:mamba"), zero::Error);
  EXPECT_THROW(partition_stages(stage_items(2), 2, "balanced"), zero::Error);
}
