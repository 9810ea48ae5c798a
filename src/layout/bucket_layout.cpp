#include "layout/bucket_layout.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

namespace zero::layout {

std::vector<int> backward_order(size_t n, const std::vector<int>& groups, const std::vector<int>& replica_group_of) {
  std::vector<int> order;
  for (size_t i = n; i-- > 0;) order.push_back(static_cast<int>(i));
  if (groups.empty()) return order;
  std::map<int, int> first_registered;
  for (size_t i = n; i-- > 0;) first_registered[groups[i]] = static_cast<int>(i);
  auto replicas = [&](int p) { return replica_group_of.empty() ? 0 : replica_group_of[static_cast<size_t>(p)]; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int first_a = first_registered[groups[static_cast<size_t>(a)]];
    const int first_b = first_registered[groups[static_cast<size_t>(b)]];
    if (first_a != first_b) return first_a > first_b;
    return replicas(a) < replicas(b);
  });
  return order;
}

BucketLayout::BucketLayout(const std::vector<int64_t>& numels, int world_size, int64_t alignment,
                           int64_t bucket_elements, const std::vector<int>& order, const std::vector<int>& groups,
                           const ReplicaGroups& replicas)
    : world_size_(world_size), slots_(numels.size()) {
  if (world_size < 1 || alignment < 1 || bucket_elements < 1) {
    throw std::invalid_argument("BucketLayout: world_size, alignment and bucket_elements must be >= 1");
  }
  std::vector<int> sequence = order;
  if (sequence.empty()) {
    sequence.resize(numels.size());
    std::iota(sequence.begin(), sequence.end(), 0);
  }
  if (sequence.size() != numels.size())
    throw std::invalid_argument("BucketLayout: order must list every parameter once");
  if (!groups.empty() && groups.size() != numels.size())
    throw std::invalid_argument("BucketLayout: groups must give every parameter a group");
  partitions_ = replicas.partitions.empty() ? std::vector<int>{world_size} : replicas.partitions;
  if (partitions_[0] != world_size || (!replicas.of_param.empty() && replicas.of_param.size() != numels.size()))
    throw std::invalid_argument("BucketLayout: replica group 0 has world_size partitions, and every parameter a group");
  for (int n : partitions_)
    if (n < 1) throw std::invalid_argument("BucketLayout: a replica group has >= 1 partitions");
  auto close = [&] {
    Bucket& b = buckets_.back();
    const int64_t quantum = static_cast<int64_t>(b.partitions) * alignment;
    b.padded = (b.numel + quantum - 1) / quantum * quantum;
    if (b.padded == 0) b.padded = quantum;  // an all-empty bucket still has one quantum, so shards exist
    b.shard = b.padded / b.partitions;
    b.owned_offset = owned_;
    owned_ += b.shard;
    padded_ += b.padded;
  };
  int previous_group = 0, previous_replicas = 0;
  for (int p : sequence) {
    const int64_t n = numels.at(static_cast<size_t>(p));
    const int group = groups.empty() ? 0 : groups[static_cast<size_t>(p)];
    const int replica_group = replicas.of_param.empty() ? 0 : replicas.of_param[static_cast<size_t>(p)];
    if (replica_group < 0 || replica_group >= static_cast<int>(partitions_.size()))
      throw std::invalid_argument("BucketLayout: a parameter's replica group does not exist");
    const bool new_group = !buckets_.empty() && (group != previous_group || replica_group != previous_replicas);
    previous_group = group;
    previous_replicas = replica_group;
    if (buckets_.empty() || new_group || (buckets_.back().numel > 0 && buckets_.back().numel + n > bucket_elements)) {
      if (!buckets_.empty()) close();
      buckets_.emplace_back();
      buckets_.back().replica_group = replica_group;
      buckets_.back().partitions = partitions_[static_cast<size_t>(replica_group)];
    }
    Bucket& b = buckets_.back();
    slots_[static_cast<size_t>(p)] = {static_cast<int>(buckets_.size() - 1), b.numel, n};
    b.params.push_back(p);
    b.numel += n;
    numel_ += n;
  }
  if (!buckets_.empty()) close();
}

bool BucketLayout::partitioned() const {
  return std::any_of(partitions_.begin(), partitions_.end(), [](int n) { return n > 1; });
}

int64_t BucketLayout::owned_valid(int bucket, int rank) const {
  const Bucket& b = buckets_.at(static_cast<size_t>(bucket));
  const int64_t begin = rank * b.shard;
  return std::clamp<int64_t>(b.numel - begin, 0, b.shard);
}

int64_t BucketLayout::owned_valid(int rank) const {
  int64_t total = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) total += owned_valid(static_cast<int>(b), rank);
  return total;
}

std::optional<Fragment> BucketLayout::fragment(int param, int rank) const {
  const ParamSlot& s = slot(param);
  const Bucket& b = buckets_[static_cast<size_t>(s.bucket)];
  const int64_t shard_begin = rank * b.shard, shard_end = shard_begin + b.shard;
  const int64_t begin = std::max(s.offset, shard_begin), end = std::min(s.offset + s.numel, shard_end);
  if (begin >= end) return std::nullopt;
  return Fragment{begin - s.offset, end - s.offset, b.owned_offset + (begin - shard_begin)};
}

}  // namespace zero::layout
