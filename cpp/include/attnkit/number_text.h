// Floating-point numbers as JSON text: each row of a matrix as its values' shortest decimal forms that read
// back as the same number (std::to_chars), comma-separated. A server writes float arrays this way; Python's
// float repr gives the same numbers (its text can differ: 1e-04 here, 0.0001 there).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit {

// The rows of x (rows x cols, row-major) as text, "v0,v1,...": every value formatted as a double (a float
// is widened exactly), so a JSON reader's float64 is the value itself. Throws std::invalid_argument on
// NaN or infinity, which JSON cannot write.
template <class T>
std::vector<std::string> rows_as_text(const T* x, std::int64_t rows, std::int64_t cols);

}  // namespace attnkit
