// Every runtime class as TorchScript, torch.export and C++ see it: one m.class_ block per
// class, the methods it exposes and, for classes that hold state worth saving, a pickle
// pair whose restore path runs the validating constructor.
#include "runtime/classes.h"

#include <quiver/feature_tiers.h>
#include <quiver/host_pin.h>
#include <quiver/ipc_buffer.h>

namespace quiver::runtime {

void register_runtime_classes(torch::Library& m) {
  m.class_<HostPin>("HostPin")
      .def(torch::init<at::Tensor>())
      .def("tensor", &HostPin::tensor)
      .def("registered_here", &HostPin::registered_here);
  m.class_<IpcBuffer>("IpcBuffer")
      .def(torch::init<int64_t, int64_t>())
      .def("tensor", &IpcBuffer::tensor)
      .def("handle", &IpcBuffer::handle)
      .def("mark_unmapped", &IpcBuffer::mark_unmapped)
      .def("nbytes", &IpcBuffer::nbytes)
      .def("device", &IpcBuffer::device)
      .def_static("open", &IpcBuffer::open);
  m.class_<FeatureTiers>("FeatureTiers")
      .def(torch::init<std::vector<at::Tensor>, std::optional<at::Tensor>>())
      .def("gather", &FeatureTiers::gather)
      .def("tiers", &FeatureTiers::tiers)
      .def("positions", &FeatureTiers::positions)
      .def("num_rows", &FeatureTiers::num_rows)
      .def("shape", &FeatureTiers::shape)
      .def("leading_rows", &FeatureTiers::leading_rows)
      .def_pickle(
          [](const c10::intrusive_ptr<FeatureTiers>& self) { return self->state(); },
          [](FeatureTiers::State state) { return FeatureTiers::from_state(std::move(state)); });
}

}  // namespace quiver::runtime
