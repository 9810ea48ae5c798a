// Instruction data for supervised fine-tuning, from a local JSON or JSONL file, as zero-finetune
// reads it (docs/finetune.md):
//
//   - the alpaca layout (`instruction`, optional `input`, `output`: yahma/alpaca-cleaned's),
//     rendered with Stanford Alpaca's prompt; the response is `output` followed by the tokenizer's
//     EOS token, and only the response is learned (the prompt's labels are -100);
//   - chat `messages` ({role, content}), rendered with the model's chat_template; only the
//     assistant turns are learned.
//
// Rows longer than model_max_length are cut at its end; a row left with nothing to learn is
// dropped (and counted). Every problem names the file and the line (JSONL) or record (JSON array).
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::text {
class Tokenizer;
}

namespace zero::finetune {

inline constexpr int32_t kIgnoreIndex = -100;  // a label the loss leaves out, as PyTorch's ignore_index

struct Example {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;  // the ids, or kIgnoreIndex where the token is not learned
  int64_t record = 0;           // where it came from: line of a JSONL file, index of a JSON array
};

struct InstructionData {
  std::vector<Example> examples;
  int64_t records = 0;    // records read
  int64_t truncated = 0;  // rows cut at model_max_length
  int64_t dropped = 0;    // rows with nothing left to learn once cut
  int64_t alpaca = 0, chat = 0;  // records of each layout
};

// Reads and tokenizes `path`. An empty file, a malformed record or a record of neither layout is
// an error naming the file and the line or record.
InstructionData read_instruction_data(const std::string& path, const text::Tokenizer& tokenizer,
                                      int64_t model_max_length);

// Stanford Alpaca's prompt for a record (with or without `input`), ending in "### Response:".
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

}  // namespace zero::finetune
