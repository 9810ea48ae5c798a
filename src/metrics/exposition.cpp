#include "metrics/exposition.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace zero::metrics {

const char* to_string(MetricType type) {
  switch (type) {
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kCounter:
      return "counter";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Note: as Go's strconv.FormatFloat(v, 'g', -1, 64), which Prometheus's own clients use: the
  // shortest digits that read back as the same double, in exponent form when the exponent is
  // below -4 or at least 6 ("0.0001", "123456", "1e-05", "1.073741824e+09"). Matching it keeps
  // the `le` label strings the same as other exporters'.
  char text[40];
  const auto scientific = std::to_chars(text, text + sizeof(text), value, std::chars_format::scientific);
  int exponent = 0;
  const char* e = std::find(text, scientific.ptr, 'e');
  std::from_chars(e + (e[1] == '+' ? 2 : 1), scientific.ptr, exponent);  // from_chars takes no '+'
  if (exponent < -4 || exponent >= 6) return std::string(text, scientific.ptr);
  const auto fixed = std::to_chars(text, text + sizeof(text), value, std::chars_format::fixed);
  return std::string(text, fixed.ptr);
}

namespace {

std::string escape(std::string_view text, bool escape_quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escape_quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// `name{a="x",b="y"[,le="..."]} value`, or `name value` without labels.
void append_sample(std::string& out, std::string_view name, const Labels& labels, std::string_view le,
                   const std::string& value) {
  out += name;
  if (!labels.empty() || !le.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [label, label_value] : labels) {
      if (!first) out += ',';
      first = false;
      out += label + "=\"" + escape_label_value(label_value) + '"';
    }
    if (!le.empty()) out += std::string(first ? "" : ",") + "le=\"" + std::string(le) + '"';
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

void append_histogram(std::string& out, const std::string& name, const Series& series) {
  const Histogram::Snapshot snap = series.histogram->snapshot();
  for (size_t i = 0; i < snap.cumulative_counts.size(); ++i) {
    const std::string le = i < snap.upper_bounds.size() ? format_value(snap.upper_bounds[i]) : "+Inf";
    append_sample(out, name + "_bucket", series.labels, le, std::to_string(snap.cumulative_counts[i]));
  }
  append_sample(out, name + "_sum", series.labels, {}, format_value(snap.sum));
  append_sample(out, name + "_count", series.labels, {}, std::to_string(snap.count));
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escape(value, true); }
std::string escape_help(std::string_view help) { return escape(help, false); }

void append_family(std::string& out, const Family& family, const std::vector<const Series*>& series) {
  out += "# HELP " + family.name + ' ' + escape_help(family.help) + '\n';
  out += "# TYPE " + family.name + ' ' + to_string(family.type) + '\n';
  for (const Series* s : series) {
    switch (family.type) {
      case MetricType::kGauge:
        append_sample(out, family.name, s->labels, {}, format_value(s->gauge->value()));
        break;
      case MetricType::kCounter:
        append_sample(out, family.name, s->labels, {}, format_value(s->counter->value()));
        break;
      case MetricType::kHistogram:
        append_histogram(out, family.name, *s);
        break;
    }
  }
}

}  // namespace zero::metrics
