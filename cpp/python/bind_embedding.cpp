// Binding of the table lookup's gradient (C-contiguous arrays; grad_weight is updated in place).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void embedding_backward(CArray<T> grad_weight, Offsets ids, CArray<T> grad, std::int64_t padding_idx) {
  require(grad_weight.ndim() == 2 && ids.ndim() == 1 && grad.ndim() == 2, "grad_weight and grad must be 2-D, ids 1-D");
  const std::int64_t tokens = ids.shape(0), vocab = grad_weight.shape(0), width = grad_weight.shape(1);
  require(grad.shape(0) == tokens && grad.shape(1) == width, "grad must have shape (ids.size, grad_weight.shape[1])");
  const std::int64_t* id = ids.data();
  // The ids address rows of grad_weight: out-of-range ones would write outside it.
  for (std::int64_t t = 0; t < tokens; ++t) require(id[t] >= 0 && id[t] < vocab, "ids must be in [0, vocab)");
  EmbeddingBackwardArgs<T> a{grad_weight.mutable_data(), grad.data(), id, tokens, vocab, width, padding_idx};
  py::gil_scoped_release release;
  active_kernels().get<T>().embedding_backward(a);
}

}  // namespace

void bind_embedding(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("embedding_backward", &embedding_backward<T>, py::arg("grad_weight").noconvert(), py::arg("ids").noconvert(),
          py::arg("grad").noconvert(), py::arg("padding_idx"));
  });
}

}  // namespace attnkit
