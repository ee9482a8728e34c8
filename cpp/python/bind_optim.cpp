// Bindings of the optimiser kernels over lists of tensors: the fused AdamW update (in place) and the float64 sums
// of squares. The op layer (ops/optim.py) checks types, shapes and scalars; the checks here are the ones a
// per-array loop in Python would pay for on every training step (~1 ms for a small model's 68 parameters): each
// array's dtype, layout, size and writeability, and that no two arrays overlap (the tensors' blocks run at once).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

std::string item_name(const char* list, std::size_t i) { return std::string(list) + "[" + std::to_string(i) + "]"; }

// Element i of a list as a C-contiguous array of T (never a converted copy: the kernel writes in place), with
// ndim and shape those of params[i] where given. Names are built only for an error.
template <class T>
CArray<T> element(const py::list& list, const char* name, std::size_t i, const char* dtype_of,
                  const CArray<T>* param = nullptr) {
  const py::handle obj = list[i];
  if (!py::isinstance<py::array>(obj)) throw py::type_error(item_name(name, i) + " must be a float32 or float64 ndarray");
  if (!py::isinstance<py::array_t<T>>(obj)) {
    throw py::type_error(item_name(name, i) + " must have the dtype of " + dtype_of);
  }
  if (!py::isinstance<CArray<T>>(obj)) {
    throw py::value_error(item_name(name, i) + " must be C-contiguous (it is used in place, never copied)");
  }
  auto arr = obj.cast<CArray<T>>();
  if (param != nullptr) {
    bool same = arr.ndim() == param->ndim();
    for (py::ssize_t ax = 0; same && ax < arr.ndim(); ++ax) same = arr.shape(ax) == param->shape(ax);
    if (!same) throw py::value_error(item_name(name, i) + " must have the shape of " + item_name("params", i));
  }
  return arr;
}

// No two non-empty arrays may overlap: (first byte, list, item) of each, sorted, each ending before the next starts.
void require_disjoint(std::vector<std::tuple<std::uintptr_t, int, std::size_t>> ranges,
                      const std::vector<std::int64_t>& bytes, const char* const* names) {
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t r = 1; r < ranges.size(); ++r) {
    const auto& [begin, list, item] = ranges[r - 1];
    const auto& [next, next_list, next_item] = ranges[r];
    if (next < begin + static_cast<std::uintptr_t>(bytes[item])) {
      throw py::value_error(item_name(names[list], item) + " and " + item_name(names[next_list], next_item) +
                            " must not share memory: each is read or updated in place");
    }
  }
}

template <class T>
void adamw_update(const py::list& params, const py::list& grads, const py::list& exp_avgs,
                  const py::list& exp_avg_sqs, double step_size, double beta1, double beta2, double denom_scale,
                  double eps, const std::vector<double>& shrinks, double grad_scale, bool zero_grad) {
  const std::size_t count = params.size();
  require(grads.size() == count && exp_avgs.size() == count && exp_avg_sqs.size() == count && shrinks.size() == count,
          "params, grads, exp_avgs, exp_avg_sqs and shrinks must have the same length");
  std::vector<CArray<T>> keep;  // the arrays outlive the kernel call
  keep.reserve(4 * count);
  std::vector<AdamWArgs<T>> items(count);
  std::vector<std::tuple<std::uintptr_t, int, std::size_t>> ranges;
  std::vector<std::int64_t> bytes(count);
  const py::list* lists[4] = {&params, &grads, &exp_avgs, &exp_avg_sqs};
  const char* names[4] = {"params", "grads", "exp_avgs", "exp_avg_sqs"};
  for (std::size_t i = 0; i < count; ++i) {
    T* data[4];
    for (int k = 0; k < 4; ++k) {
      keep.push_back(element<T>(*lists[k], names[k], i, "params[0]", k == 0 ? nullptr : &keep[4 * i]));
      CArray<T>& arr = keep.back();
      if ((k != 1 || zero_grad) && !arr.writeable()) {
        throw py::value_error(item_name(names[k], i) + " must be writeable: it is updated in place");
      }
      data[k] = const_cast<T*>(arr.data());  // grad is written only when zero_grad
      if (arr.size() > 0) ranges.emplace_back(reinterpret_cast<std::uintptr_t>(data[k]), k, i);
    }
    const std::int64_t n = keep[4 * i].size();
    bytes[i] = n * static_cast<std::int64_t>(sizeof(T));
    // 1 - beta is formed in double and then rounded, as NumPy does with `grad * (1.0 - beta1)`.
    items[i] = AdamWArgs<T>{data[0], data[1], data[2], data[3], n, T(beta1), T(1.0 - beta1), T(beta2), T(1.0 - beta2),
                            T(denom_scale), T(eps), T(step_size), T(shrinks[i]), T(grad_scale), shrinks[i] != 1.0,
                            grad_scale != 1.0, zero_grad};
  }
  require_disjoint(std::move(ranges), bytes, names);
  py::gil_scoped_release release;
  active_kernels().get<T>().adamw_update(items.data(), static_cast<std::int64_t>(count));
}

template <class T>
std::vector<double> sum_of_squares(const py::list& xs) {
  const std::size_t count = xs.size();
  std::vector<CArray<T>> keep;
  keep.reserve(count);
  std::vector<double> out(count, 0.0);
  std::vector<SumOfSquaresArgs<T>> items(count);
  for (std::size_t i = 0; i < count; ++i) {
    keep.push_back(element<T>(xs, "xs", i, "xs[0]"));
    items[i] = SumOfSquaresArgs<T>{keep.back().data(), keep.back().size(), &out[i]};
  }
  {
    py::gil_scoped_release release;
    active_kernels().get<T>().sum_of_squares(items.data(), static_cast<std::int64_t>(count));
  }
  return out;
}

// The kernel's dtype is the first array's; every other array must have it (element<T> refuses one that does not).
bool first_is_float32(const py::list& arrays, const char* name) {
  require(!arrays.empty(), std::string(name) + " must not be empty");
  if (py::isinstance<py::array_t<float>>(arrays[0])) return true;
  if (!py::isinstance<py::array_t<double>>(arrays[0])) {
    throw py::type_error(std::string(name) + "[0] must be a float32 or float64 ndarray");
  }
  return false;
}

}  // namespace

void bind_optim(py::module_& m) {
  m.def(
      "adamw_update",
      [](const py::list& params, const py::list& grads, const py::list& exp_avgs, const py::list& exp_avg_sqs,
         double step_size, double beta1, double beta2, double denom_scale, double eps,
         const std::vector<double>& shrinks, double grad_scale, bool zero_grad) {
        auto update = first_is_float32(params, "params") ? &adamw_update<float> : &adamw_update<double>;
        update(params, grads, exp_avgs, exp_avg_sqs, step_size, beta1, beta2, denom_scale, eps, shrinks, grad_scale,
               zero_grad);
      },
      py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("step_size"),
      py::arg("beta1"), py::arg("beta2"), py::arg("denom_scale"), py::arg("eps"), py::arg("shrinks"),
      py::arg("grad_scale") = 1.0, py::arg("zero_grad") = false);
  m.def(
      "sum_of_squares",
      [](const py::list& xs) { return first_is_float32(xs, "xs") ? sum_of_squares<float>(xs) : sum_of_squares<double>(xs); },
      py::arg("xs"));
}

}  // namespace attnkit
