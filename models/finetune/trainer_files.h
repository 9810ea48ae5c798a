// What the Hugging Face Trainer prints and writes besides the weights: its log lines (a Python
// dict's repr), trainer_state.json, and checkpoint-N directories rotated by save_total_limit.
// Torch-free.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace zero::finetune {

// A JSON object as Python prints the dict: {'loss': 1.2345, 'grad_norm': 0.5, 'epoch': 0.01}
// (keys in the object's order; floats as repr(float), integers as ints).
std::string python_dict(const nlohmann::ordered_json& logs);
// repr(float): the shortest text that reads back the same, "1.0" for a whole number, "2e-05".
std::string python_float(double value);
// Python's round(value, digits) (round half to even on the decimal value).
double python_round(double value, int digits);

struct TrainerState {
  int64_t global_step = 0, max_steps = 0, logging_steps = 0, eval_steps = 0, save_steps = 0;
  int64_t train_batch_size = 0;
  double epoch = 0, num_train_epochs = 0;
  nlohmann::json log_history = nlohmann::json::array();
};
// trainer_state.json as the Trainer writes it (json.dumps(indent=2, sort_keys=True)).
void write_trainer_state(const TrainerState& state, const std::string& path);
TrainerState read_trainer_state(const std::string& path);

// The checkpoint-N directories under `output_dir`, by N.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir);
// Removes the oldest checkpoints beyond `limit` (0: keep all), never `keep` (the one just
// written, even when an earlier run left higher-numbered ones); returns the removed paths.
std::vector<std::string> rotate_checkpoints(const std::string& output_dir, int64_t limit, const std::string& keep = "");

}  // namespace zero::finetune
