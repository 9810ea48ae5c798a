// The main of every bench_* executable: ZERO_BENCH_PROGRAM names the program (bench/CMakeLists.txt).
#include "programs.h"

int main(int argc, char** argv) { return ZERO_BENCH_PROGRAM::run(argc, argv); }
