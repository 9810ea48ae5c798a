// The rank wrappers' start markers taken out of the launcher's stderr, however the stream is cut.
#include "launch/start_markers.h"

#include <gtest/gtest.h>

using namespace zero::launch;

namespace {

// What mpirun forwards: ranks' output, a progress bar's \r line, and markers, one mid-line.
const std::string kStream = "rank 0 says hi\n" + start_marker(0, "zc-node1") + "\rstep 1/9 [###   ]" +
                            start_marker(3, "zc-node2") + "\rstep 2/9 [#####  ]\n" + start_marker(1, "") +
                            "x\x1fy not a marker\n";
const std::string kPassed = "rank 0 says hi\n\rstep 1/9 [###   ]\rstep 2/9 [#####  ]\nx\x1fy not a marker\n";

}  // namespace

TEST(StartMarkers, TakenOutWhateverTheChunks) {
  for (size_t chunk : {kStream.size(), size_t{1}, size_t{2}, size_t{7}, size_t{19}}) {
    StartMarkerFilter filter;
    std::string passed;
    for (size_t at = 0; at < kStream.size(); at += chunk) passed += filter.feed(kStream.substr(at, chunk));
    passed += filter.flush();
    EXPECT_EQ(passed, kPassed) << "chunks of " << chunk;
    EXPECT_EQ(filter.started(), (std::map<int, std::string>{{0, "zc-node1"}, {1, ""}, {3, "zc-node2"}}));
  }
}

TEST(StartMarkers, OrdinaryOutputIsNeverHeld) {
  StartMarkerFilter filter;
  EXPECT_EQ(filter.feed("\rstep 5/9 [####"), "\rstep 5/9 [####");  // no newline yet: passed at once
  EXPECT_EQ(filter.feed("\x1fzero-run:sta"), "");                // could be a marker: held
  EXPECT_EQ(filter.feed("rtled\n"), "\x1fzero-run:startled\n");    // was not
  const std::string unended = "\x1fzero-run:started " + std::string(600, '7');
  EXPECT_EQ(filter.feed(unended), unended);  // too long for a marker: passed on
  EXPECT_TRUE(filter.started().empty());
}

TEST(StartMarkers, WhereRanksDidNotStart) {
  const std::vector<HostSlots> hosts = {{"zc-node1", {0, 1}}, {"zc-node2", {0, 1}}, {"zc-node3", {0}}};
  const std::map<int, std::string> started = {{0, "zc-node1"}, {1, "zc-node1"}, {3, "zc-node2"}};
  EXPECT_EQ(hosts_not_started(hosts, started), (std::vector<std::string>{"zc-node2", "zc-node3"}));
  EXPECT_EQ(ranks_not_started(5, started), (std::vector<int>{2, 4}));
  EXPECT_TRUE(hosts_not_started({{"srun-node", {}}}, started).empty());  // srun places ranks itself
}
