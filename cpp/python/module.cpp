// attnkit._core. cpp/python is the only place pybind11 appears: module.cpp defines the module and
// the configuration functions; bind_<concept>.cpp bind the kernels. Arguments are converted and
// checked with the GIL held; kernels run with it released. Arrays are taken exactly as given
// (noconvert): attnkit.ops lays them out, so a hidden conversion copy fails loudly instead.
// std::invalid_argument -> ValueError, std::bad_alloc -> MemoryError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "bindings.h"

namespace attnkit {
std::map<std::string, std::string> build_info();
}

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "attnkit compiled kernels (private: use attnkit.ops)";
  attnkit::bind_softmax(m);
  attnkit::bind_attention(m);
  attnkit::bind_positions(m);
  attnkit::bind_random_features(m);
  attnkit::bind_linear_attention(m);
  attnkit::bind_cross_entropy(m);
  attnkit::bind_layer_norm(m);
  attnkit::bind_gelu(m);
  attnkit::bind_swiglu(m);
  attnkit::bind_dropout(m);
  attnkit::bind_embedding(m);
  attnkit::bind_matmul(m);
  attnkit::bind_optim(m);
  attnkit::bind_int8_linear(m);
  attnkit::bind_block_quantized(m);
  attnkit::bind_decoding_plan(m);
  attnkit::bind_number_text(m);
  m.def("available_isas", &attnkit::available_isas, "ISA variants compiled in and supported by this CPU.");
  m.def("get_isa", &attnkit::active_isa, "The ISA variant in use.");
  m.def("set_isa", &attnkit::set_isa, py::arg("name"), "Switch the ISA variant (for tests).");
  m.def("build_info", &attnkit::build_info);
  m.def("set_num_threads", &attnkit::set_num_threads, py::arg("n"));
  m.def("get_num_threads", &attnkit::get_num_threads);
  m.def("set_call_threads", &attnkit::set_call_threads, py::arg("n"),
        "The calling thread's own kernel thread count (0: the process's).");
  m.def("get_call_threads", &attnkit::get_call_threads);
  m.def(
      "team_stats",
      [] {
        const attnkit::TeamStats s = attnkit::team_stats();
        return std::map<std::string, std::int64_t>{{"calls", s.calls}, {"inline_calls", s.inline_calls},
                                                   {"sleeps", s.sleeps}, {"busy_checks", s.busy_checks},
                                                   {"busy", s.busy}};
      },
      "Counters of attnkit's worker threads since the process started.");
  m.attr("__version__") = ATTNKIT_VERSION;
}
