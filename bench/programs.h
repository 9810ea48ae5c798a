// The benchmark programs' entry points. Their code is compiled once, as one library
// (zero_bench_programs: one unity batch, one pass over LibTorch's deferred template
// instantiations instead of eight), and each bench_* executable is bench/main.cpp calling one of
// them (docs/testing.md, "What makes the build fast").
#pragma once

namespace bench_activation { int run(int argc, char** argv); }
namespace bench_adam { int run(int argc, char** argv); }
namespace bench_big { int run(int argc, char** argv); }
namespace bench_comm { int run(int argc, char** argv); }
namespace bench_engine { int run(int argc, char** argv); }
namespace bench_gpt { int run(int argc, char** argv); }
namespace bench_limits { int run(int argc, char** argv); }
namespace bench_profile { int run(int argc, char** argv); }
namespace bench_swap { int run(int argc, char** argv); }
