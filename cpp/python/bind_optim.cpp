// Bindings of the optimiser kernels: the fused AdamW update (in place) and the float64 sum of squares.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void adamw_update(CArray<T> param, CArray<T> grad, CArray<T> exp_avg, CArray<T> exp_avg_sq, double step_size,
                  double beta1, double beta2, double denom_scale, double eps, double shrink, bool decay,
                  double grad_scale, bool zero_grad) {
  const auto n = param.size();
  require(grad.size() == n && exp_avg.size() == n && exp_avg_sq.size() == n,
          "grad, exp_avg and exp_avg_sq must have as many elements as param");
  // 1 - beta is formed in double and then rounded, as NumPy does with `grad * (1.0 - beta1)`.
  T* g = zero_grad ? grad.mutable_data() : const_cast<T*>(grad.data());  // written only when zero_grad
  AdamWArgs<T> a{param.mutable_data(), g, exp_avg.mutable_data(), exp_avg_sq.mutable_data(), n,
                 T(beta1), T(1.0 - beta1), T(beta2), T(1.0 - beta2), T(denom_scale), T(eps), T(step_size),
                 T(shrink), T(grad_scale), decay, grad_scale != 1.0, zero_grad};
  py::gil_scoped_release release;
  active_kernels().get<T>().adamw_update(a);
}

template <class T>
double sum_of_squares(CArray<T> x) {
  double out = 0.0;
  SumOfSquaresArgs<T> a{x.data(), x.size(), &out};
  py::gil_scoped_release release;
  active_kernels().get<T>().sum_of_squares(a);
  return out;
}

}  // namespace

void bind_optim(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("adamw_update", &adamw_update<T>, py::arg("param").noconvert(), py::arg("grad").noconvert(),
          py::arg("exp_avg").noconvert(), py::arg("exp_avg_sq").noconvert(), py::arg("step_size"),
          py::arg("beta1"), py::arg("beta2"), py::arg("denom_scale"), py::arg("eps"), py::arg("shrink"),
          py::arg("decay"), py::arg("grad_scale") = 1.0, py::arg("zero_grad") = false);
    m.def("sum_of_squares", &sum_of_squares<T>, py::arg("x").noconvert());
  });
}

}  // namespace attnkit
