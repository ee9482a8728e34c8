// See attnkit/number_text.h.
#include "attnkit/number_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace attnkit {

template <class T>
std::vector<std::string> rows_as_text(const T* x, std::int64_t rows, std::int64_t cols) {
  std::vector<std::string> out(static_cast<std::size_t>(rows));
  char digits[32];  // the longest shortest form of a double is 24 characters ("-2.2250738585072014e-308")
  for (std::int64_t r = 0; r < rows; ++r) {
    std::string& text = out[static_cast<std::size_t>(r)];
    text.reserve(static_cast<std::size_t>(cols) * 12);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = static_cast<double>(x[r * cols + c]);
      if (!std::isfinite(v))
        throw std::invalid_argument("value at row " + std::to_string(r) + ", column " + std::to_string(c) +
                                    " is not finite: JSON cannot write it");
      if (c) text.push_back(',');
      char* end = std::to_chars(digits, digits + sizeof(digits), v).ptr;
      text.append(digits, end);
      // An integral value keeps a fraction ("1.0", as Python writes it), so that JSON readers make it a float.
      if (std::find_if(digits, end, [](char ch) { return ch == '.' || ch == 'e'; }) == end) text.append(".0");
    }
  }
  return out;
}

template std::vector<std::string> rows_as_text<float>(const float*, std::int64_t, std::int64_t);
template std::vector<std::string> rows_as_text<double>(const double*, std::int64_t, std::int64_t);

}  // namespace attnkit
