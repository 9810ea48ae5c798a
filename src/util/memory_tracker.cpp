#include "zero/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "zero/error.h"

namespace zero {
namespace {

std::atomic<int64_t> g_current{0}, g_peak{0}, g_budget{0}, g_largest{0};
c10::DeleterFnPtr g_base_deleter = nullptr;
std::mutex g_mutex;
std::unordered_map<void*, int64_t>* g_sizes = new std::unordered_map<void*, int64_t>();  // never freed: exit order

// The context is the data pointer itself (LibTorch's raw_allocate needs that), so sizes are
// looked up by address.
void tracked_delete(void* data) {
  if (data == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_sizes->find(data);
    if (it != g_sizes->end()) {
      g_current -= it->second;
      g_sizes->erase(it);
    }
  }
  g_base_deleter(data);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}
  // LibTorch 1.13 declares `allocate(size_t) const`, 2.x `allocate(size_t)` and a pure
  // `copy_data`: both spellings are here, without `override`, so each version overrides its own.
  c10::DataPtr allocate(size_t n) const { return tracked(n); }  // NOLINT(modernize-use-override)
  c10::DataPtr allocate(size_t n) { return tracked(n); }        // NOLINT(modernize-use-override)
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }

 private:
  c10::DataPtr tracked(size_t n) const {
    const auto bytes = static_cast<int64_t>(n);
    const int64_t now = g_current.fetch_add(bytes) + bytes;
    const int64_t budget = g_budget.load();
    if (budget > 0 && now > budget) {
      g_current -= bytes;
      throw Error("memory budget exceeded: " + std::to_string(bytes) + " bytes requested with " +
                      std::to_string(now - bytes) + " of " + std::to_string(budget) + " in use",
                  "MemoryTracker");
    }
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    int64_t largest = g_largest.load();
    while (bytes > largest && !g_largest.compare_exchange_weak(largest, bytes)) {
    }
    c10::DataPtr inner = base_->allocate(n);
    const c10::Device device = inner.device();
    void* data = inner.release_context();  // the default CPU allocator's context is its data
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(g_mutex);
      (*g_sizes)[data] = bytes;
    } else {
      g_current -= bytes;
    }
    return {data, data, &tracked_delete, device};
  }

  c10::Allocator* base_;
};

}  // namespace

MemoryTracker& MemoryTracker::install() {
  static MemoryTracker tracker;
  static TrackingAllocator* allocator = [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    g_base_deleter = base->raw_deleter();
    if (g_base_deleter == nullptr)
      throw Error("MemoryTracker: the CPU allocator has no raw deleter to wrap", "MemoryTracker");
    auto* a = new TrackingAllocator(base);  // lives as long as the process
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  (void)allocator;
  return tracker;
}

int64_t MemoryTracker::current() const { return g_current.load(); }
int64_t MemoryTracker::peak() const { return g_peak.load(); }
int64_t MemoryTracker::largest_allocation() const { return g_largest.load(); }
void MemoryTracker::reset_peak() {
  g_peak = g_current.load();
  g_largest = 0;
}
void MemoryTracker::set_budget(int64_t bytes) { g_budget = bytes; }
int64_t MemoryTracker::budget() const { return g_budget.load(); }

}  // namespace zero
