#include "layout/bucket_layout.h"

#include <gtest/gtest.h>

using zero::layout::BucketLayout;

TEST(BucketLayout, PacksPadsAndShards) {
  // Three ranks, alignment 2: a quantum of 6 elements.
  BucketLayout l({5, 4, 10, 3}, 3, 2, 10);
  ASSERT_EQ(l.buckets().size(), 3u);  // {5,4} | {10} | {3}
  EXPECT_EQ(l.buckets()[0].params, (std::vector<int>{0, 1}));
  EXPECT_EQ(l.buckets()[0].numel, 9);
  EXPECT_EQ(l.buckets()[0].padded, 12);
  EXPECT_EQ(l.buckets()[0].shard, 4);
  EXPECT_EQ(l.buckets()[1].padded, 12);
  EXPECT_EQ(l.buckets()[2].padded, 6);
  EXPECT_EQ(l.buckets()[2].owned_offset, 8);  // 4 + 4
  EXPECT_EQ(l.numel(), 22);
  EXPECT_EQ(l.padded_numel(), 30);
  EXPECT_EQ(l.padding(), 8);
  EXPECT_EQ(l.owned_numel(), 10);
  EXPECT_EQ(l.slot(1).bucket, 0);
  EXPECT_EQ(l.slot(1).offset, 5);
  EXPECT_EQ(l.slot(3).bucket, 2);
}

TEST(BucketLayout, AParameterLargerThanABucketGetsItsOwn) {
  BucketLayout l({3, 100, 3}, 2, 1, 8);
  ASSERT_EQ(l.buckets().size(), 3u);
  EXPECT_EQ(l.buckets()[1].params, std::vector<int>{1});
  EXPECT_EQ(l.buckets()[1].padded, 100);
}

TEST(BucketLayout, FragmentsCoverEveryParameterExactlyOnce) {
  for (int world : {1, 2, 3, 4}) {
    BucketLayout l({7, 1, 13, 2, 9}, world, 4, 16, {4, 3, 2, 1, 0});
    std::vector<int64_t> covered(5, 0);
    for (int p = 0; p < 5; ++p) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        auto f = l.fragment(p, r);
        if (!f) continue;
        EXPECT_EQ(f->param_begin, next) << "param " << p << " rank " << r;  // in rank order, contiguous
        next = f->param_end;
        EXPECT_GE(f->owned_offset, 0);
        EXPECT_LE(f->owned_offset + (f->param_end - f->param_begin), l.owned_numel());
        covered[p] += f->param_end - f->param_begin;
      }
      EXPECT_EQ(covered[p], l.slot(p).numel);
    }
    int64_t valid = 0;
    for (int r = 0; r < world; ++r) valid += l.owned_valid(r);
    EXPECT_EQ(valid, l.numel()) << world;
  }
}

TEST(BucketLayout, UnevenShardsAtThreeRanks) {
  BucketLayout l({10}, 3, 1, 100);  // padded to 12, shards of 4: ranks own 4, 4, 2 real elements
  EXPECT_EQ(l.owned_valid(0, 0), 4);
  EXPECT_EQ(l.owned_valid(0, 2), 2);
  auto f = l.fragment(0, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->param_begin, 8);
  EXPECT_EQ(f->param_end, 10);
  EXPECT_EQ(f->owned_offset, 0);
}

TEST(BucketLayout, OrderDecidesTheBuckets) {
  BucketLayout l({4, 4, 4}, 1, 1, 8, {2, 1, 0});
  EXPECT_EQ(l.buckets()[0].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(l.slot(0).bucket, 1);
  EXPECT_THROW(BucketLayout({1, 2}, 1, 1, 8, {0}), std::invalid_argument);
}

TEST(BucketLayout, GroupsNeverShareABucket) {
  // Stage 3: one bucket per unit, whatever bucket_elements says; order puts each group together.
  const BucketLayout layout({10, 20, 30, 40, 5}, 2, 4, 1000, {4, 3, 2, 1, 0}, {0, 1, 1, 2, 0});
  ASSERT_EQ(layout.buckets().size(), 4u);  // {4}, {3}, {2, 1}, {0}: group 0 appears twice in this order
  EXPECT_EQ(layout.buckets()[0].params, std::vector<int>({4}));
  EXPECT_EQ(layout.buckets()[1].params, std::vector<int>({3}));
  EXPECT_EQ(layout.buckets()[2].params, std::vector<int>({2, 1}));
  EXPECT_EQ(layout.buckets()[2].numel, 50);
  EXPECT_EQ(layout.buckets()[2].padded, 56);  // a multiple of world_size × alignment
  EXPECT_THROW(BucketLayout({1, 2}, 1, 1, 10, {}, {0}), std::invalid_argument);
}

// Expert parallelism: experts (replica group 1) held alike by 2 ranks, dense weights by 4. A bucket
// never mixes the groups; each is padded to and cut into its own group's partitions, and a rank's
// owned buffer holds its shard of each, back to back.
TEST(BucketLayout, ReplicaGroupsCutTheirBucketsIntoTheirOwnPartitions) {
  // Parameters 0 and 3 dense, 1 and 2 experts; laid out 3, 2, 1, 0 with buckets of 100.
  const zero::layout::ReplicaGroups replicas{.of_param = {0, 1, 1, 0}, .partitions = {4, 2}};
  BucketLayout l({10, 6, 5, 7}, 4, 2, 100, {3, 2, 1, 0}, {}, replicas);
  ASSERT_EQ(l.buckets().size(), 3u);  // {3} dense | {2, 1} experts | {0} dense
  EXPECT_EQ(l.buckets()[0].replica_group, 0);
  EXPECT_EQ(l.buckets()[0].padded, 8);  // 7 up to 4 × 2
  EXPECT_EQ(l.buckets()[0].shard, 2);
  EXPECT_EQ(l.buckets()[1].replica_group, 1);
  EXPECT_EQ(l.buckets()[1].partitions, 2);
  EXPECT_EQ(l.buckets()[1].padded, 12);  // 11 up to 2 × 2
  EXPECT_EQ(l.buckets()[1].shard, 6);
  EXPECT_EQ(l.buckets()[1].owned_offset, 2);
  EXPECT_EQ(l.buckets()[2].owned_offset, 8);
  EXPECT_EQ(l.buckets()[2].shard, 4);  // 10 up to 16, over 4
  EXPECT_EQ(l.owned_numel(), 12);
  EXPECT_TRUE(l.partitioned());
  // Each group's shards cover its parameters once: dense over 4 ranks, experts over 2.
  for (int p = 0; p < 4; ++p) {
    const int ranks = p == 1 || p == 2 ? 2 : 4;
    int64_t covered = 0;
    for (int r = 0; r < ranks; ++r)
      if (auto f = l.fragment(p, r)) covered += f->param_end - f->param_begin;
    EXPECT_EQ(covered, l.slot(p).numel) << p;
  }
  // Rank 3 of the world is rank 1 of its expert-data-parallel group.
  const auto expert = l.owned_fragment(1, {3, 1});
  ASSERT_TRUE(expert);
  EXPECT_EQ(expert->param_begin, 1);  // parameter 2 (5) first, then 1 (6): shard 1 starts at 6
  EXPECT_EQ(expert->owned_offset, 2);
  // Stage 0: one partition everywhere; not partitioned.
  const BucketLayout whole({10, 6, 5, 7}, 1, 2, 100, {3, 2, 1, 0}, {}, {.of_param = {0, 1, 1, 0}, .partitions = {1, 1}});
  EXPECT_FALSE(whole.partitioned());
  EXPECT_EQ(whole.owned_numel(), whole.padded_numel());
  EXPECT_THROW(BucketLayout({1, 2}, 2, 1, 8, {}, {}, {.of_param = {0, 2}, .partitions = {2, 1}}), std::invalid_argument);
  EXPECT_THROW(BucketLayout({1, 2}, 2, 1, 8, {}, {}, {.of_param = {0, 1}, .partitions = {3, 1}}), std::invalid_argument);
}
