// Python's repr(float), for CSV files that match DeepSpeed's byte for byte (its csv.writer
// prints a float with repr).
#pragma once

#include <string>

namespace zero::monitor {

// The shortest digits that read back as `value`, laid out as Python lays them out:
// 0.001, 1e-05, 65536.0, 1e+16, nan, inf, -0.0.
std::string python_float_repr(double value);

}  // namespace zero::monitor
