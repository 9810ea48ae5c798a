#include "checkpoint/consolidate.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <vector>

#include "checkpoint/safetensors.h"
#include "zero/error.h"

namespace zero::checkpoint {
namespace {

template <class Out>
std::vector<Out> converted(const std::vector<float>& values) {
  std::vector<Out> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), [](float v) { return Out(v); });  // round to nearest even
  return out;
}

class SafetensorsSink : public ConsolidationSink {
 public:
  SafetensorsSink(std::string out, OutputDtype dtype) : out_(std::move(out)), dtype_(dtype) {}

  std::vector<int> order(const WholeParameters& reader) override {
    const char* dtype = dtype_ == OutputDtype::kFp32 ? "F32" : dtype_ == OutputDtype::kBf16 ? "BF16" : "F16";
    const uint64_t element = dtype_ == OutputDtype::kFp32 ? 4 : 2;
    std::vector<SafetensorsEntry> entries;
    std::vector<int> order;
    for (int p = 0; p < reader.num_params(); ++p) {
      entries.push_back({reader.name(p), dtype, reader.shape(p), element * static_cast<uint64_t>(reader.numel(p))});
      order.push_back(p);
    }
    writer_ = std::make_unique<SafetensorsWriter>(
        out_, entries,
        std::map<std::string, std::string>{{"format", "pt"},
                                           {"source", "zerocpp checkpoint " + reader.tag()},
                                           {"global_steps", reader.manifest()["counters"]["global_steps"].dump()}});
    return order;
  }

  void append(int, const std::vector<float>& values) override {
    if (dtype_ == OutputDtype::kFp32) {
      writer_->append(values.data(), 4 * values.size());
    } else if (dtype_ == OutputDtype::kBf16) {
      const auto out = converted<c10::BFloat16>(values);
      writer_->append(out.data(), 2 * out.size());
    } else {
      const auto out = converted<c10::Half>(values);
      writer_->append(out.data(), 2 * out.size());
    }
  }

  void finish() override { writer_->finish(); }

 private:
  std::string out_;
  OutputDtype dtype_;
  std::unique_ptr<SafetensorsWriter> writer_;
};

}  // namespace

std::unique_ptr<ConsolidationSink> safetensors_sink(const std::string& out, OutputDtype dtype) {
  return std::make_unique<SafetensorsSink>(out, dtype);
}

ConsolidateResult consolidate(WholeParameters& reader, ConsolidationSink& sink) {
  if (!reader.has_kind("master"))
    throw Error(reader.manifest_path() + ": the checkpoint holds no master weights", reader.manifest_path());
  ConsolidateResult result;
  for (int p : sink.order(reader)) {
    std::vector<float> values(static_cast<size_t>(reader.numel(p)));
    reader.read_whole(p, "master", values.data());
    sink.append(p, values);
    result.largest_tensor = std::max(result.largest_tensor, reader.numel(p));
    result.elements += reader.numel(p);
    ++result.tensors;
  }
  sink.finish();
  return result;
}

ConsolidateResult consolidate(const ConsolidateOptions& options) {
  StagedCheckpoint reader(options.dir, options.tag);
  auto sink = safetensors_sink(options.out, options.dtype);
  return consolidate(reader, *sink);
}

}  // namespace zero::checkpoint
