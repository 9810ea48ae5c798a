#include "monitor/python_float.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

namespace zero::monitor {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";

  // to_chars' scientific form carries the shortest round-trip digits, as Python's repr does:
  // "-1.2345e+16" -> sign, digits "12345", exponent 16.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view text(buf, static_cast<size_t>(end - buf));
  std::string sign;
  if (text.front() == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());

  // Python (float_repr_style 'short', format code 'r') switches to exponent notation when the
  // decimal point would sit more than 16 places right of the first digit or 4+ zeros left of it.
  int point = exponent + 1;  // digits to the left of the decimal point
  if (point > 16 || point < -3) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::string exp_digits = std::to_string(std::abs(exponent));
    if (exp_digits.size() < 2) exp_digits.insert(0, "0");
    return out + (exponent < 0 ? "e-" : "e+") + exp_digits;
  }
  if (point <= 0) return sign + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
  if (static_cast<size_t>(point) >= digits.size()) {
    return sign + digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
  }
  return sign + digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
}

}  // namespace zero::monitor
