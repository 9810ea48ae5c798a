// zero::estimate against published figures: the ZeRO paper's Table 1, the seed document's
// "16 bytes per parameter" and "1.12 TB for 70B", DeepSpeed's documented t5-3b ZeRO-3 table; and
// the engine's layout arithmetic on a case worked by hand (tests/dist/gpt_memory_estimate_test.cpp
// holds it equal to Engine::memory_report() for a real GPT).
#include "zero/estimate.h"

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "zero/error.h"

namespace est = zero::estimate;

namespace {
std::string gb(double bytes, int decimals) { return fmt::format("{:.{}f}", bytes / 1e9, decimals); }
std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / est::kGiB); }
}  // namespace

TEST(Estimate, ZeroPaperTableOne) {
  // Rajbhandari et al. 2020, Table 1: Ψ = 7.5 B, N_d = 64, K = 12.
  const est::PaperStates p = est::zero_paper(7.5e9, 64);
  EXPECT_EQ(gb(p.baseline, 0), "120");
  EXPECT_EQ(gb(p.os, 1), "31.4");
  EXPECT_EQ(gb(p.os_g, 1), "16.6");
  EXPECT_EQ(gb(p.os_g_p, 2), "1.88");
}

TEST(Estimate, SixteenBytesPerParameterAndSeventyBillion) {
  EXPECT_EQ(est::zero_paper(1, 1).baseline, 16);
  EXPECT_EQ(est::zero_paper(70e9, 8).baseline, 1.12e12);  // "1.12 TB per rank" without ZeRO
}

TEST(Estimate, DeepSpeedsT5ThreeBillionTable) {
  // DeepSpeed's memory docs: t5-3b, 2851 M parameters, largest layer 32 M, 1 node x 8 GPUs.
  const double psi = 2851e6, largest = 32e6;
  const est::HostDevice full = est::deepspeed_zero3(psi, largest, 8, 1, true, true, true);
  const est::HostDevice optimizer = est::deepspeed_zero3(psi, largest, 8, 1, true, false, true);
  const est::HostDevice none = est::deepspeed_zero3(psi, largest, 8, 1, false, false, true);
  EXPECT_EQ(gib(full.device), "0.12");
  EXPECT_EQ(gib(optimizer.device), "0.78");
  EXPECT_EQ(gib(none.device), "6.09");
  EXPECT_EQ(gib(full.host), "71.69");
  EXPECT_EQ(gib(optimizer.host), "63.72");
  EXPECT_EQ(gib(none.host), "1.43");
  // Without zero_init every rank first builds the whole model on the host.
  EXPECT_EQ(gib(est::deepspeed_zero3(psi, largest, 8, 1, false, false, false).host), gib(psi * 4 * 8 * 1.5));
  // ZeRO-2: DeepSpeed's code (2Ψ + 18Ψ/G), not its table's 15.93 (an older 4Ψ + 16Ψ/G).
  EXPECT_EQ(gib(est::deepspeed_zero2(psi, 8, 1, false).device), "11.28");
  EXPECT_EQ(gib(est::deepspeed_zero2(psi, 8, 1, true).device), gib(2 * psi));
}

TEST(Estimate, CommunicationPerStage) {
  EXPECT_EQ(est::comm_bytes_per_step(1e9, 4, 2, 2), 2 * 1e9 * 0.75 * 2);
  EXPECT_EQ(est::comm_bytes_per_step(1e9, 4, 3, 2), 3 * 1e9 * 0.75 * 2);
  EXPECT_EQ(est::comm_bytes_per_step(1e9, 1, 3, 2), 0);
}

TEST(Estimate, EngineLayoutByHand) {
  // Two fp32 parameters of 10 and 20 elements, 2 ranks: one bucket of 30 padded to a multiple
  // of 2 ranks x 8 (32 bytes of fp32): 32 elements, 16 owned per rank.
  est::EngineLayoutInput in{.numels = {10, 20}, .stage = 1, .world_size = 2};
  est::EngineStates s = est::engine_model_states(in);
  EXPECT_EQ(s.parameters, 32 * 4);
  EXPECT_EQ(s.gradients, 32 * 4);
  EXPECT_EQ(s.master_weights, 16 * 4);
  EXPECT_EQ(s.optimizer_state, 2 * 16 * 4);
  EXPECT_EQ(s.padding_elements, 2);
  // Stage 3 with the 20-element one in a unit: buckets of 16 (root) and 32 (the unit); the unit
  // keeps 16 per rank, and its fp32 shard is its master.
  in.stage = 3;
  in.units = {-1, 0};
  s = est::engine_model_states(in);
  EXPECT_EQ(s.parameters, (16 + 16) * 4);
  EXPECT_EQ(s.gradients, 24 * 4);
  EXPECT_EQ(s.master_weights, 8 * 4);
  EXPECT_EQ(s.largest_unit_bytes, 32 * 4);
  // bf16 at stage 0: whole 16-bit parameters and gradients, a whole fp32 master.
  in = {.numels = {10, 20}, .stage = 0, .world_size = 2, .dtype_bytes = 2};
  s = est::engine_model_states(in);
  EXPECT_EQ(s.parameters, 32 * 2);  // padded to 16 (32 bytes of bf16), one partition
  EXPECT_EQ(s.master_weights, 32 * 4);
}

TEST(Estimate, CountsWithSuffixesAndErrorsNamingTheFlag) {
  EXPECT_EQ(est::parse_count("7.5B", "--params"), 7.5e9);
  EXPECT_EQ(est::parse_count("2851M", "--params"), 2851e6);
  EXPECT_EQ(est::parse_count("32k", "--largest-layer"), 32e3);
  EXPECT_EQ(est::parse_count("1e9", "--params"), 1e9);
  try {
    est::parse_count("lots", "--params");
    FAIL() << "no error";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--params lots"), std::string::npos) << e.what();
  }
}
