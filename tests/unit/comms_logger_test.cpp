// The comms logger's bookkeeping, fed by hand: which ops it profiles, its rows, its bandwidths.
#include "comm/comms_logger.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace {

zero::CollectiveRecord gather(double seconds) {
  // A 4 MiB all-gather output at 4 ranks: each rank sends 3/4 of it.
  return {zero::CollectiveOp::kAllGather, 4 << 20, 0.75 * (4 << 20), seconds};
}

}  // namespace

TEST(CommsLogger, ProfOpsTakesDeepSpeedsNamesAndProfAllEverything) {
  zero::CommsLoggerConfig only;
  only.enabled = true;
  only.prof_all = false;
  only.prof_ops = {"all_gather_into_tensor", "reduce_scatter"};
  zero::CommsLogger logger(only, 4, "intra-node", nullptr);
  EXPECT_TRUE(logger.profiles(zero::CollectiveOp::kAllGather));
  EXPECT_TRUE(logger.profiles(zero::CollectiveOp::kReduceScatter));
  EXPECT_FALSE(logger.profiles(zero::CollectiveOp::kAllReduce));
  logger.record({zero::CollectiveOp::kAllReduce, 8, 12, 0.001}, "step");
  EXPECT_TRUE(logger.rows().empty()) << "an op outside prof_ops was counted";
  zero::CommsLoggerConfig all;
  all.enabled = true;
  zero::CommsLogger everything(all, 4, "intra-node", nullptr);
  for (auto op : {zero::CollectiveOp::kAllReduce, zero::CollectiveOp::kBroadcast, zero::CollectiveOp::kAllToAll})
    EXPECT_TRUE(everything.profiles(op));
}

TEST(CommsLogger, RowsPerSizeAndPhaseWithNcclTestsBandwidths) {
  zero::CommsLoggerConfig c;
  c.enabled = true;
  c.debug = true;
  c.verbose = true;
  std::FILE* verbose = std::tmpfile();
  zero::CommsLogger logger(c, 4, "inter-node", verbose);
  logger.record(gather(0.001), "forward");
  logger.record(gather(0.003), "forward");
  logger.record(gather(0.002), "backward_inner");
  const auto rows = logger.rows();
  ASSERT_EQ(rows.size(), 2u) << "debug splits the rows by phase";
  const zero::CommsRow& forward = rows[0].phase == "forward" ? rows[0] : rows[1];
  EXPECT_EQ(forward.count, 2);
  EXPECT_DOUBLE_EQ(forward.bus_bytes, 2 * 0.75 * (4 << 20));
  EXPECT_DOUBLE_EQ(forward.seconds, 0.004);
  EXPECT_DOUBLE_EQ(logger.bus_bytes(), 3 * 0.75 * (4 << 20));
  // algbw = 4 MiB × 2 / 4 ms = 16.78 Gbps; busbw = 3/4 of it.
  const std::string summary = logger.summary(3);
  EXPECT_NE(summary.find("forward             inter-node  4.00 MB                2           6.00 MB              4.00           2.000         16.78         12.58"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("sent by this rank in these collectives: 9437184 bytes (9.00 MB) over 4 ranks, 3145728 bytes per step over 3 steps"), std::string::npos)
      << summary;
  std::rewind(verbose);
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, verbose), nullptr);
  EXPECT_STREQ(line, "comm op: all_gather | forward | inter-node | time (ms): 1.00 | msg size: 4.00 MB | algbw (Gbps): 33.55 | busbw (Gbps): 25.17\n");
  std::fclose(verbose);
}

TEST(CommsLogger, HumanBytesUsesDeepSpeedsUnits) {
  EXPECT_EQ(zero::human_bytes(0), "0B");
  EXPECT_EQ(zero::human_bytes(8), "8.00 B");
  EXPECT_EQ(zero::human_bytes(1536), "1.50 KB");
  EXPECT_EQ(zero::human_bytes(3.0 * (1 << 30)), "3.00 GB");
}
