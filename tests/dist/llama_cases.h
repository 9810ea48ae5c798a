// The Llama family's test cases (tests/reference/make_llama_cases.sh, written by CTest's
// llama_cases fixture into $ZERO_LLAMA_CASES) and the trainer options that run them, shared by the
// Llama tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <cstring>

#include "checkpoint/safetensors_reader.h"
#include "models/common/trainer.h"
#include "tests/dist/dist_test_world.h"
#include "tests/dist/scratch_dir.h"

namespace llama_cases {

using namespace zero::gpt;
namespace fs = std::filesystem;


inline constexpr int64_t kRows = 12, kSeq = 16;  // as make_llama_cases.sh; 12 rows split over 1-4 ranks

inline fs::path cases_dir() {
  const char* dir = std::getenv("ZERO_LLAMA_CASES");
  return dir ? fs::path(dir) : fs::path();
}

inline const std::vector<std::string> kCases = {"llama_gqa", "llama3_tied", "mistral_window", "qwen2_bias"};

inline nlohmann::json expected(const std::string& name, const std::string& file = "expected.json") {
  std::ifstream in(cases_dir() / name / file);
  return nlohmann::json::parse(in);
}

// extra: more top-level blocks, such as R"("bf16": {"enabled": true})" (none: fp32); zero_extra:
// more zero_optimization keys, such as R"("offload_optimizer": {"device": "cpu"})".
inline std::string config(int stage, const std::string& optimizer, const std::string& extra = "",
                          int64_t bucket_elements = 2000, const std::string& zero_extra = "") {
  const std::string opt = optimizer == "sgd"
                              ? R"({"type": "SGD", "params": {"lr": 0.5}})"
                              : R"({"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.95], "eps": 1e-8,
                                    "weight_decay": 0.1}})";
  // Small buckets by default: several reductions in flight per step at stages 0-2.
  return R"({"train_batch_size": 12, "zero_allow_untested_optimizer": true, "zero_optimization": {"stage": )" + std::to_string(stage) +
         R"(, "reduce_bucket_size": )" + std::to_string(bucket_elements) + R"(, "overlap_comm": true, "stage3_param_persistence_threshold": 0)" +
         (zero_extra.empty() ? "" : ", " + zero_extra) + R"(},
            )" + (extra.empty() ? "" : extra + ", ") + R"("optimizer": )" + opt + "}";
}

inline TrainerOptions options(const std::string& name, int stage, const std::string& optimizer, int64_t steps) {
  TrainerOptions o;
  o.model_dir = (cases_dir() / name / "model").string();
  o.train_data = (cases_dir() / "tokens.bin").string();
  o.seq = kSeq;
  o.steps = steps;
  o.config_text = config(stage, optimizer);
  return o;
}

inline std::vector<double> losses(const TrainerResult& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s.loss);
  return out;
}

// Two Hugging Face directories hold the same tensors, bit for bit (names, dtypes, shapes, bytes).
inline void expect_same_weights(const std::string& a_dir, const std::string& b_dir, const std::string& what) {
  const zero::checkpoint::SafetensorsModel in(a_dir), out(b_dir);
  EXPECT_EQ(in.names(), out.names()) << what;
  for (const auto& tensor : in.names()) {
    const auto a = in.find(tensor), b = out.find(tensor);
    ASSERT_TRUE(b.file) << what << ": " << tensor << " not exported";
    EXPECT_EQ(a.tensor->dtype, b.tensor->dtype) << what << ": " << tensor;
    EXPECT_EQ(a.tensor->shape, b.tensor->shape) << what << ": " << tensor;
    const uint64_t bytes = a.tensor->end - a.tensor->begin;
    ASSERT_EQ(bytes, b.tensor->end - b.tensor->begin) << what << ": " << tensor;
    EXPECT_EQ(std::memcmp(a.file->data(*a.tensor), b.file->data(*b.tensor), bytes), 0) << what << ": " << tensor << " changed";
  }
}

// Each loss within 1e-5 of the reference's.
inline void expect_reference(const std::vector<double>& got, const std::vector<double>& reference,
                             const std::string& what) {
  ASSERT_EQ(got.size(), reference.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], reference[i], 1e-5) << what << ", step " << i + 1;
}

// The message of the error training with `o` raises, or "" when it trains.
inline std::string refusal(const TrainerOptions& o) {
  try {
    train_model(o, test_world(), nullptr);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

struct Scratch : ScratchDir {
  Scratch() : ScratchDir("zero_llama_test") {}
};

class LlamaCases : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cases_dir().empty()) GTEST_FAIL() << "ZERO_LLAMA_CASES is not set (CTest's llama_cases fixture sets it)";
  }
};

}  // namespace llama_cases
