// Checkpoints that are damaged or come from elsewhere: a flipped bit, a truncated or missing
// file, other parameter names (DamagedFilesAndNamesAreClearErrors), and a manifest or files a
// stranger wrote (ManifestsFromElsewhereAreContained, issue 37). Each is an error naming the file
// and the key, in bounded time, before anything is loaded.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "checkpoint/files.h"
#include "checkpoint/reader.h"
#include "tests/dist/engine_checkpoint_util.h"

using namespace checkpoint_test;
namespace fs = std::filesystem;

namespace {

// DIR/good: a one-process stage-1 run's checkpoint after 2 steps, for the tests that damage it.
fs::path saved_checkpoint(const std::string& name, Session& s) {
  const fs::path dir = fs::temp_directory_path() / (name + "." + std::to_string(getpid()));
  s.run(0, 2);
  s.engine->save_checkpoint(dir.string(), "good");
  return dir;
}

}  // namespace

TEST(EngineCheckpoint, DamagedFilesAndNamesAreClearErrors) {
  if (test_world().rank() != 0) return;  // one process, its own files
  zero::World single = zero::World::single_process();
  Session s(config(1), single);
  const fs::path dir = saved_checkpoint("zero_ckpt_damage", s);
  const fs::path shard = dir / "good" / "rank0.bin";
  const fs::path pristine = dir / "pristine.bin";
  fs::copy_file(shard, pristine);
  auto load = [&] { return error_of([&] { Session(config(1), single).engine->load_checkpoint(dir.string()); }); };
  EXPECT_EQ(load(), "");

  {  // one flipped bit
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(100);
    f.write(&c, 1);
  }
  std::string e = load();
  EXPECT_NE(e.find(shard.string() + ": checksum mismatch"), std::string::npos) << e;
  fs::resize_file(shard, fs::file_size(pristine) - 8);
  e = load();
  EXPECT_NE(e.find(shard.string() + ": " + std::to_string(fs::file_size(pristine) - 8) + " bytes, the manifest says"),
            std::string::npos)
      << e;
  fs::remove(shard);
  e = load();
  EXPECT_NE(e.find(shard.string() + ": cannot open the file"), std::string::npos) << e;
  fs::copy_file(pristine, shard);
  EXPECT_EQ(load(), "");

  // An interrupted later save leaves a partial directory: `latest` still names the good one.
  fs::create_directories(dir / "global_step9.partial");
  std::ofstream(dir / "global_step9.partial" / "rank0.bin") << "half";
  EXPECT_EQ(load(), "");
  EXPECT_EQ(s.engine->save_checkpoint(dir.string()), "global_step2");
  EXPECT_FALSE(fs::exists(dir / "global_step2.partial"));

  // Names: a model whose parameters are called differently.
  struct Renamed : torch::nn::Module {
    Renamed() {
      a = register_module("fc1", torch::nn::Linear(16, 32));
      b = register_module("out", torch::nn::Linear(32, 8));
    }
    torch::nn::Linear a{nullptr}, b{nullptr};
  };
  Renamed renamed;
  zero::Config cfg = zero::Config::parse(config(1));
  cfg.resolve({.world_size = 1});
  zero::Engine engine(renamed, cfg, single);
  e = error_of([&] { engine.load_checkpoint(dir.string()); });
  EXPECT_NE(e.find("parameter names differ"), std::string::npos) << e;
  EXPECT_NE(e.find("missing from the checkpoint: out.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("not in the model: fc2.bias"), std::string::npos) << e;
  zero::LoadOptions lenient;
  lenient.strict = false;
  EXPECT_EQ(error_of([&] { engine.load_checkpoint(dir.string(), lenient); }), "");
  EXPECT_TRUE(renamed.a->weight.equal(s.model->fc1->weight)) << "fc1 loads by name";
  fs::remove_all(dir);
}

// A checkpoint from elsewhere (issue 37): whatever its manifest says, a load reads only the
// regular files inside DIR/TAG, checks every key before using it, and ends in bounded time with
// an error naming the manifest (or the file) and the key.
TEST(EngineCheckpoint, ManifestsFromElsewhereAreContained) {
  if (test_world().rank() != 0) return;  // one process, its own files
  zero::World single = zero::World::single_process();
  Session s(config(1), single);
  const fs::path dir = saved_checkpoint("zero_ckpt_hostile", s);
  const fs::path manifest = dir / "good" / "manifest.json";
  const std::string pristine = zero::checkpoint::read_text_file(manifest.string());
  // Each case: an edit of the manifest, and what the error must say after the manifest's path.
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"traversal", [](nlohmann::json& m) { m["files"][0]["file"] = "../../../../etc/passwd"; },
       "files[0].file: \"../../../../etc/passwd\" is not a file name inside the checkpoint"},
      {"absolute path", [](nlohmann::json& m) { m["rng_states"][0]["file"] = "/etc/passwd"; },
       "rng_states[0].file: \"/etc/passwd\" is not a file name inside the checkpoint"},
      {"missing file key", [](nlohmann::json& m) { m["files"][0].erase("file"); }, "files[0].file: missing"},
      {"missing counters", [](nlohmann::json& m) { m.erase("counters"); }, "(the manifest).counters: missing"},
      {"a counter of the wrong type", [](nlohmann::json& m) { m["counters"]["global_steps"] = "2"; },
       "counters.global_steps: not an integer"},
      {"a shape that overflows", [](nlohmann::json& m) { m["params"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40}; },
       "params[0].shape: its element count overflows"},
      {"a fragment past its parameter", [](nlohmann::json& m) { m["files"][0]["fragments"][0][2] = int64_t{1} << 50; },
       "files[0].fragments[0][2]:"},
      {"a fragment past the file's buffer", [](nlohmann::json& m) { m["files"][0]["fragments"][0][3] = int64_t{1} << 40; },
       "files[0].fragments[0][3]:"},
      {"a parameter index out of range", [](nlohmann::json& m) { m["files"][0]["fragments"][0][0] = 99; },
       "files[0].fragments[0][0]: 99 is outside"},
      {"a random state of a gigabyte", [](nlohmann::json& m) { m["rng_states"][0]["bytes"] = int64_t{1} << 30; },
       "rng_states[0].bytes:"},
  };
  for (const Case& c : cases) {
    nlohmann::json m = nlohmann::json::parse(pristine);
    c.edit(m);
    std::ofstream(manifest) << m.dump();
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of([&] { Session(config(1), single).engine->load_checkpoint(dir.string()); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10) << c.what;
    EXPECT_NE(e.find(manifest.string() + ": " + c.says), std::string::npos) << c.what << ": " << e;
  }
  std::ofstream(manifest) << pristine;
  EXPECT_EQ(error_of([&] { Session(config(1), single).engine->load_checkpoint(dir.string()); }), "");

  // The files themselves: a link (to a device that never ends, or to a file outside), a FIFO
  // (that would block the reader forever), a directory. Refused before anything is read.
  const fs::path shard = dir / "good" / "rank0.bin", kept = dir / "rank0.bin.kept";
  fs::rename(shard, kept);
  const auto refused = [&](const std::string& says) {
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of([&] { Session(config(1), single).engine->load_checkpoint(dir.string()); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10) << says;
    EXPECT_NE(e.find(shard.string() + ": " + says), std::string::npos) << e;
    fs::remove(shard);
  };
  fs::create_symlink("/dev/zero", shard);
  refused("is a symbolic link");
  fs::create_symlink(kept, shard);
  refused("is a symbolic link");
  ASSERT_EQ(mkfifo(shard.c_str(), 0600), 0);
  refused("is a FIFO, not a regular file");
  fs::create_directory(shard);
  refused("is a directory, not a regular file");
  fs::rename(kept, shard);
  EXPECT_EQ(error_of([&] { Session(config(1), single).engine->load_checkpoint(dir.string()); }), "");
  fs::remove_all(dir);
}

