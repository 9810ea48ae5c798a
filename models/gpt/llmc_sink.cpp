#include "models/gpt/llmc_sink.h"

#include "models/gpt/llmc_files.h"
#include "zero/error.h"

namespace zero::gpt {
namespace {

// zero-train stores the model's shape in its client state; llm.c lays tensors out by kind
// across layers (llmc_files.h), ours are named h<l>.block.<kind> and <kind>.
class LlmcSink : public checkpoint::ConsolidationSink {
 public:
  explicit LlmcSink(std::string out) : out_(std::move(out)) {}

  std::vector<int> order(const checkpoint::WholeParameters& reader) override {
    const nlohmann::json& client = reader.manifest().value("client_state", nlohmann::json::object());
    if (!client.contains("gpt"))
      throw Error(reader.manifest_path() +
                      ": no GPT shape in the client state (--format llmc needs a checkpoint saved by zero-train)",
                  reader.manifest_path());
    const nlohmann::json& g = client["gpt"];
    const GptShape shape{.max_seq = g.at("max_seq"), .vocab = g.at("vocab"), .layers = g.at("layers"),
                         .heads = g.at("heads"), .channels = g.at("channels"), .padded_vocab = g.at("padded_vocab")};
    std::vector<int> order;
    auto add = [&](const std::string& name) {
      const int p = reader.find(name);
      if (p < 0)
        throw Error(reader.manifest_path() + ": no parameter " + name + " for --format llmc", reader.manifest_path());
      order.push_back(p);
    };
    for (const TensorSpec& spec : checkpoint_tensors(shape)) {
      if (!per_layer(spec)) {
        add(spec.name);
        continue;
      }
      for (int l = 0; l < shape.layers; ++l) add("h" + std::to_string(l) + ".block." + spec.name);
    }
    writer_ = std::make_unique<LlmcCheckpointWriter>(out_, shape);
    return order;
  }

  void append(int, const std::vector<float>& values) override {
    writer_->append(values.data(), static_cast<int64_t>(values.size()));
  }
  void finish() override { writer_->finish(); }

 private:
  std::string out_;
  std::unique_ptr<LlmcCheckpointWriter> writer_;
};

}  // namespace

std::unique_ptr<checkpoint::ConsolidationSink> llmc_sink(const std::string& out) {
  return std::make_unique<LlmcSink>(out);
}

}  // namespace zero::gpt
