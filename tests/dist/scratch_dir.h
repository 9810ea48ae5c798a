// A directory of this MPI job for a test's files: named after rank 0's pid (every rank the same
// path), made by every rank, removed by rank 0 once every rank is done with it.
#pragma once

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/dist/dist_test_world.h"

struct ScratchDir {
  std::filesystem::path root;
  explicit ScratchDir(const std::string& prefix) {
    at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
    test_world().communicator().broadcast(pid, 0, {.async = false});
    root = std::filesystem::temp_directory_path() / (prefix + "." + std::to_string(pid.item<int64_t>()));
    std::filesystem::create_directories(root);
  }
  ~ScratchDir() {
    test_world().communicator().barrier({.async = false});
    if (test_world().rank() == 0) std::filesystem::remove_all(root);
  }
};
