// A PEFT LoRA adapter merged into its base, as PEFT's merge_and_unload computes it: every adapted
// layer's weight W + scaling · (lora_B · lora_A) (in fp32, then the base's dtype), every module
// saved whole replaced by the adapter's copy, everything else as the base has it. Torch-free and
// streaming: one tensor in memory at a time, written into a Hugging Face directory
// (checkpoint/hf_directory_writer.h: nothing is left in OUT on an error) with the base's
// config.json and tokenizer files. `zero-ckpt merge-lora BASE ADAPTER --out DIR`, and
// `--merge_adapter` after training.
#pragma once

#include <cstdint>
#include <string>

namespace zero::llama {

struct MergeResult {
  int64_t tensors = 0, merged = 0, replaced = 0;  // written; of them, adapted and saved whole
};

// An adapter tensor that names no tensor of the base, or whose shape does not fit it, is an error
// naming the file and the tensor (an adapter for another base model).
MergeResult merge_lora(const std::string& base_dir, const std::string& adapter_dir, const std::string& out_dir,
                       uint64_t max_shard_bytes = 0);

}  // namespace zero::llama
