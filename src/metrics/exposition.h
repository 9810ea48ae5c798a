// The Prometheus text exposition format 0.0.4: sample values, escaping, and one family's lines.
// https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "metrics/family.h"

namespace zero::metrics {

// The shortest text that reads back as the same double, formatted as Prometheus's Go clients do;
// "+Inf", "-Inf" and "NaN" as Prometheus spells them.
std::string format_value(double value);

// A label value: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view value);
// HELP text: backslash and newline escaped (quotes are literal there).
std::string escape_help(std::string_view help);

// Appends `# HELP`, `# TYPE` and one line per sample of `series` (a histogram: its cumulative
// _bucket lines ending with le="+Inf", then _sum and _count).
void append_family(std::string& out, const Family& family, const std::vector<const Series*>& series);

}  // namespace zero::metrics
