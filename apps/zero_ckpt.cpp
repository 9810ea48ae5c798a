// zero-ckpt — looks into zerocpp checkpoints and turns them into single files.
//
//   zero-ckpt inspect DIR [--tag T] [--no-verify]
//   zero-ckpt consolidate DIR --out FILE [--tag T] [--dtype fp32|bf16|fp16] [--format safetensors|llmc|hf]
//                                        [--max-shard-size 5GB]
//   zero-ckpt merge-lora BASE ADAPTER --out DIR [--max-shard-size 5GB]
//
// inspect: what the checkpoint holds (tag, world size and stage at save, counters, state kinds,
// parameters, files with sizes) and, unless --no-verify, every file's size and checksum.
// consolidate: DeepSpeed's zero_to_fp32 — the fp32 master weights, whole, in one file, one
// parameter at a time (memory follows the largest tensor, not the model); prints its peak RSS.
// --format hf writes a Hugging Face model directory (a run of zero-train --model), in the dtype
// the run trained in unless --dtype says otherwise; of a LoRA run, the adapter in PEFT's files.
// merge-lora: a PEFT LoRA adapter merged into its base model directory (PEFT's merge_and_unload),
// a Hugging Face directory in the base's dtypes, one tensor at a time.
// Exit 0 on success, 1 with an error naming the file otherwise.
#include <fmt/core.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <map>

#include "checkpoint/consolidate.h"
#include "models/llama/lora_merge.h"
#include "checkpoint/files.h"
#include "checkpoint/reader.h"
#include "checkpoint/hf_directory_writer.h"
#include "models/gpt/llmc_sink.h"
#include "models/llama/hf_sink.h"
#include "zero/error.h"

namespace {

using zero::checkpoint::CheckpointReader;

int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

void inspect(const std::string& dir, const std::string& tag, bool verify) {
  CheckpointReader reader(dir, tag);
  const nlohmann::json& m = reader.manifest();
  fmt::print("checkpoint {} ({}, format {} version {})\n", reader.tag(), reader.manifest_path(),
             m.value("format", "?"), m.value("version", 0));
  fmt::print("saved by {} rank(s) at ZeRO stage {}, model dtype {}, train_batch_size {}\n", m.value("world_size", 0),
             m.value("stage", -1), m.value("model_dtype", "?"), m.value("train_batch_size", 0));
  fmt::print("counters: {}\n", m.value("counters", nlohmann::json::object()).dump());
  fmt::print("state kinds (fp32 each): {}{}\n", m.value("kinds", nlohmann::json::array()).dump(),
             reader.params16_dtype().empty() ? "" : ", then the model's " + reader.params16_dtype() + " weights");
  int64_t elements = 0, largest = 0;
  for (int p = 0; p < reader.num_params(); ++p) {
    elements += reader.numel(p);
    largest = std::max(largest, reader.numel(p));
  }
  fmt::print("parameters: {} tensors, {} elements (largest {})\n", reader.num_params(), elements, largest);
  for (int p = 0; p < reader.num_params(); ++p)
    fmt::print("  {} {}\n", reader.name(p), nlohmann::json(reader.shape(p)).dump());
  uint64_t bytes = 0;
  fmt::print("files:\n");
  for (const auto& f : reader.files()) {
    fmt::print("  {} {} bytes xxh3 {}\n", f.name, f.bytes, f.xxh3);
    bytes += f.bytes;
  }
  fmt::print("total {} bytes in {} file(s)\n", bytes, reader.files().size());
  if (m.contains("client_state")) fmt::print("client state: {}\n", m["client_state"].dump());
  if (verify) {
    reader.verify_all();
    fmt::print("verified: every file's size and checksum match the manifest\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zero-ckpt: inspect zerocpp checkpoints and consolidate them into one file"};
  app.require_subcommand(1);
  std::string dir, tag;

  CLI::App* inspect_cmd = app.add_subcommand("inspect", "what a checkpoint holds; verifies every file");
  bool no_verify = false;
  inspect_cmd->add_option("DIR", dir, "the checkpoint directory (holding `latest` and the tags)")->required();
  inspect_cmd->add_option("--tag", tag, "the tag to read (default: the one in DIR/latest)");
  inspect_cmd->add_flag("--no-verify", no_verify, "skip reading every file for its checksum");

  CLI::App* consolidate_cmd =
      app.add_subcommand("consolidate", "the fp32 master weights, whole, in one safetensors or llm.c file");
  zero::checkpoint::ConsolidateOptions options;
  std::string dtype = "fp32", format = "safetensors";
  consolidate_cmd->add_option("DIR", options.dir, "the checkpoint directory")->required();
  consolidate_cmd->add_option("--tag", options.tag, "the tag to read (default: the one in DIR/latest)");
  consolidate_cmd->add_option("--out", options.out, "the file to write (--format hf: the directory)")->required();
  consolidate_cmd->add_option("--dtype", dtype, "fp32, bf16 or fp16 (safetensors; hf: default the training dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  consolidate_cmd
      ->add_option("--format", format,
                   "safetensors, llmc (an llm.c GPT-2 checkpoint, fp32), or hf (a Hugging Face model directory)")
      ->check(CLI::IsMember({"safetensors", "llmc", "hf"}));
  std::string max_shard = "0";
  consolidate_cmd->add_option("--max-shard-size", max_shard, "--format hf: shards of at most this size (5GB, 500MB; 0: one file)");
  CLI::App* merge_cmd = app.add_subcommand("merge-lora", "a PEFT LoRA adapter merged into its base model");
  std::string base_dir, adapter_dir, merged_dir;
  merge_cmd->add_option("BASE", base_dir, "the base model's Hugging Face directory")->required()->check(CLI::ExistingDirectory);
  merge_cmd->add_option("ADAPTER", adapter_dir, "the adapter directory (adapter_config.json, adapter_model.safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  merge_cmd->add_option("--out", merged_dir, "the directory to write")->required();
  merge_cmd->add_option("--max-shard-size", max_shard, "shards of at most this size (5GB, 500MB; 0: one file)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (*merge_cmd) {
      const zero::llama::MergeResult r =
          zero::llama::merge_lora(base_dir, adapter_dir, merged_dir, zero::checkpoint::parse_shard_size(max_shard));
      fmt::print("zero-ckpt: wrote {} ({} tensors: {} merged with their adapter, {} replaced by the adapter's); peak "
                 "RSS {} KiB\n",
                 merged_dir, r.tensors, r.merged, r.replaced, peak_rss_kib());
      return 0;
    }
    if (*inspect_cmd) {
      inspect(dir, tag, !no_verify);
      return 0;
    }
    const std::map<std::string, zero::checkpoint::OutputDtype> dtypes = {
        {"fp32", zero::checkpoint::OutputDtype::kFp32},
        {"bf16", zero::checkpoint::OutputDtype::kBf16},
        {"fp16", zero::checkpoint::OutputDtype::kFp16}};
    options.dtype = dtypes.at(dtype);
    // Whatever layout saved it: tensor-parallel slices joined, pipeline stages one after another.
    zero::checkpoint::StagedCheckpoint reader(options.dir, options.tag);
    if (format == "llmc" && options.dtype != zero::checkpoint::OutputDtype::kFp32)
      throw zero::Error("--format llmc writes fp32 (llm.c's version 3)", "--dtype");
    const auto sink =
        format == "llmc" ? zero::gpt::llmc_sink(options.out)
        : format == "hf" ? zero::llama::hf_sink(options.out, consolidate_cmd->count("--dtype") ? dtype : "",
                                                zero::checkpoint::parse_shard_size(max_shard))
                         : zero::checkpoint::safetensors_sink(options.out, options.dtype);
    const zero::checkpoint::ConsolidateResult r = zero::checkpoint::consolidate(reader, *sink);
    fmt::print("zero-ckpt: wrote {} ({} tensors, {} elements, largest {} elements); peak RSS {} KiB\n", options.out,
               r.tensors, r.elements, r.largest_tensor, peak_rss_kib());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "zero-ckpt: error: {}\n", zero::first_line(e));
    return 1;
  }
}
