// Every runtime class as TorchScript, torch.export and C++ see it: one m.class_ block per
// class, the methods it exposes and, for classes that hold state worth saving, a pickle
// pair whose restore path runs the validating constructor.
#include "runtime/classes.h"

#include <ATen/ATen.h>

#include <quiver/batch_prefetcher.h>
#include <quiver/dist_feature.h>
#include <quiver/dist_sampler.h>
#include <quiver/feature_tiers.h>
#include <quiver/host_pin.h>
#include <quiver/ipc_buffer.h>
#include <quiver/serving.h>
#include <quiver/shard_map.h>
#include <quiver/subgraph_sampler.h>
#include <quiver/transport.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "ops/checks.h"

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
      .def("gather", &FeatureTiers::gather, "",
           {torch::arg("ids"), torch::arg("host_read_blocks") = 0})
      .def("set_stage_host_rows", &FeatureTiers::set_stage_host_rows)
      .def("set_group_host_reads", &FeatureTiers::set_group_host_reads)
      .def("stages_host_rows", &FeatureTiers::stages_host_rows)
      .def("host_read_share", &FeatureTiers::host_read_share)
      .def_static("first_host_read_share", &FeatureTiers::first_host_read_share)
      .def("set_host_read_share", &FeatureTiers::set_host_read_share)
      .def("host_read_share_fixed", &FeatureTiers::host_read_share_fixed)
      .def("note_loader_pace", &FeatureTiers::note_loader_pace)
      .def("set_follow_loader_pace", &FeatureTiers::set_follow_loader_pace)
      .def("follows_loader_pace", &FeatureTiers::follows_loader_pace)
      .def("tiers", &FeatureTiers::tiers)
      .def("positions", &FeatureTiers::positions)
      .def("num_rows", &FeatureTiers::num_rows)
      .def("shape", &FeatureTiers::shape)
      .def("leading_rows", &FeatureTiers::leading_rows)
      .def("device", &FeatureTiers::device)
      .def("release", &FeatureTiers::release)
      .def("released", &FeatureTiers::released)
      // torch.export rebuilds the fake class (torch_quiver_ops/_fake.py) from these.
      .def("__obj_flatten__",
           [](const c10::intrusive_ptr<FeatureTiers>& self) {
             // How host rows are read changes no shape, but a model may branch on the
             // settings. torch.compile guards on every value here, so a learned share,
             // which moves batch by batch, would recompile: only a fixed one is sent
             // (-1: learned).
             const double fixed_share =
                 self->host_read_share_fixed() ? self->host_read_share() : -1.0;
             return std::make_tuple(
                 std::make_tuple(std::string("tiers"), self->tiers()),
                 std::make_tuple(std::string("positions"), self->positions()),
                 std::make_tuple(std::string("stage_host_rows"), self->stages_host_rows()),
                 std::make_tuple(std::string("fixed_host_read_share"), fixed_share),
                 std::make_tuple(std::string("follow_loader_pace"), self->follows_loader_pace()));
           })
      .def_pickle(
          [](const c10::intrusive_ptr<FeatureTiers>& self) { return self->state(); },
          [](FeatureTiers::State state) { return FeatureTiers::from_state(std::move(state)); });
  m.class_<ShardMap>("ShardMap")
      .def(torch::init<at::Tensor, at::Tensor, int64_t>())
      .def_static("build", &ShardMap::build)
      .def("num_rows", &ShardMap::num_rows)
      .def("num_hosts", &ShardMap::num_hosts)
      .def("num_replicated", &ShardMap::num_replicated)
      .def("local_rows", &ShardMap::local_rows)
      .def("local_ids", &ShardMap::local_ids)
      .def("host_of", &ShardMap::host_of)
      .def("local_index", &ShardMap::local_index)
      // A list, not a tuple: torch.export's effect tokens take a method's one return as one
      // output, and a tuple would have to be two (torch 2.11).
      .def("locate",
           [](const c10::intrusive_ptr<ShardMap>& self, const at::Tensor& ids) {
             auto [host, local] = self->locate(ids);
             return std::vector<at::Tensor>{host, local};
           })
      .def("fingerprint", &ShardMap::fingerprint)
      .def("__obj_flatten__",
           [](const c10::intrusive_ptr<ShardMap>& self) {
             std::vector<int64_t> local_rows;
             for (int64_t host = 0; host < self->num_hosts(); ++host) {
               local_rows.push_back(self->local_rows(host));
             }
             return std::make_tuple(
                 std::make_tuple(std::string("host_of"), self->host_of()),
                 std::make_tuple(std::string("local_index"), self->local_index()),
                 std::make_tuple(std::string("num_hosts"), self->num_hosts()),
                 std::make_tuple(std::string("num_replicated"), self->num_replicated()),
                 std::make_tuple(std::string("local_rows"), local_rows),
                 std::make_tuple(std::string("fingerprint"), self->fingerprint()));
           })
      .def_pickle([](const c10::intrusive_ptr<ShardMap>& self) { return self->state(); },
                  [](ShardMap::State state) { return ShardMap::from_state(std::move(state)); });
  m.class_<Transport>("Transport")
      .def_static("collective", &Transport::collective)
      .def_static("rdma", &Transport::rdma_over)
      .def_static("rdma_available", &Transport::rdma_available)
      .def_static("rdma_devices", &Transport::rdma_devices)
      .def_static("rdma_defaults", &Transport::rdma_defaults)
      .def_static("check_rdma_options", &Transport::check_rdma_options)
      .def_static("agree", &Transport::agree_over)
      .def_static("tell", &Transport::tell_over)
      .def("kind", &Transport::kind)
      .def("host", &Transport::host)
      .def("num_hosts", &Transport::num_hosts)
      .def("is_collective", &Transport::is_collective)
      .def("__obj_flatten__",
           [](const c10::intrusive_ptr<Transport>& self) {
             return std::make_tuple(std::make_tuple(std::string("kind"), self->kind()),
                                    std::make_tuple(std::string("host"), self->host()),
                                    std::make_tuple(std::string("num_hosts"), self->num_hosts()),
                                    std::make_tuple(std::string("collective"), self->is_collective()));
           });
  m.class_<SubgraphSampler>("SubgraphSampler")
      .def(torch::init<at::Tensor, at::Tensor, std::optional<at::Tensor>, std::vector<int64_t>,
                       bool, std::optional<at::Tensor>, std::optional<at::Tensor>,
                       std::optional<at::Tensor>, std::optional<at::Tensor>, bool, std::string,
                       bool, std::optional<at::Tensor>, bool>())
      .def("sample_subgraph", &SubgraphSampler::sample_subgraph)
      .def("sample_subgraph_on", &SubgraphSampler::sample_subgraph_on)
      .def("neighbor_sample", &SubgraphSampler::neighbor_sample)
      .def("captures_batches", &SubgraphSampler::captures_batches)
      .def("set_uva_row_order", &SubgraphSampler::set_uva_row_order);
  m.class_<BatchPrefetcher>("BatchPrefetcher")
      .def(torch::init<c10::intrusive_ptr<SubgraphSampler>,
                       std::optional<c10::intrusive_ptr<FeatureTiers>>, std::optional<at::Tensor>,
                       int64_t, int64_t, int64_t, int64_t>())
      .def("start", &BatchPrefetcher::start)
      .def("next", &BatchPrefetcher::next)
      .def("stop", &BatchPrefetcher::stop);
  m.class_<HeteroSubgraphSampler>("HeteroSubgraphSampler")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>,
                       std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                       std::vector<int64_t>, bool, std::optional<at::Tensor>,
                       std::optional<at::Tensor>, bool, std::string, bool,
                       std::optional<at::Tensor>, std::optional<at::Tensor>, bool>())
      .def("sample", &HeteroSubgraphSampler::sample)
      .def("captures_batches", &HeteroSubgraphSampler::captures_batches)
      .def("set_uva_row_order", &HeteroSubgraphSampler::set_uva_row_order);
  m.class_<DistSampler>("DistSampler")
      .def(torch::init<const c10::intrusive_ptr<c10d::ProcessGroup>&, at::Tensor, at::Tensor,
                       at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>, bool, double,
                       std::vector<c10::intrusive_ptr<Transport>>,
                       std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>>())
      .def("sample", &DistSampler::sample)
      .def("set_bounded_slots", &DistSampler::set_bounded_slots)
      .def("set_capture_batches", &DistSampler::set_capture_batches)
      .def("set_slot_margin", &DistSampler::set_slot_margin)
      .def("slot_margin", &DistSampler::slot_margin)
      .def("last_slot_rows", &DistSampler::last_slot_rows)
      .def("overflowed_batches", &DistSampler::overflowed_batches)
      .def("size_exchanges", &DistSampler::size_exchanges)
      .def("requester_draws",
           [](const c10::intrusive_ptr<DistSampler>& self) { return self->requester_draws(); })
      .def("host", &DistSampler::host)
      .def("num_hosts", &DistSampler::num_hosts)
      .def("num_nodes", &DistSampler::num_nodes)
      .def("last_remote_nodes", &DistSampler::last_remote_nodes)
      .def("last_remote_edges", &DistSampler::last_remote_edges);
  m.class_<ServingRuntime>("ServingRuntime")
      .def(torch::init([](at::Tensor indptr, at::Tensor indices,
                          std::optional<at::Tensor> gpu_indptr,
                          std::optional<at::Tensor> gpu_indices,
                          c10::intrusive_ptr<FeatureTiers> features, std::vector<int64_t> fanouts,
                          std::string device, int64_t max_batch_nodes, double max_wait_ms,
                          int64_t max_queue, int64_t cpu_samplers, int64_t gpu_streams,
                          double threshold, int64_t seed, bool capture_batches,
                          double latency_objective_ms, int64_t max_queue_nodes) {
        ServingOptions options{std::move(fanouts), std::move(device), max_batch_nodes,
                               max_wait_ms,        max_queue,         cpu_samplers,
                               gpu_streams,        threshold,         seed,
                               capture_batches,    latency_objective_ms, max_queue_nodes};
        return c10::make_intrusive<ServingRuntime>(std::move(indptr), std::move(indices),
                                                   std::move(gpu_indptr), std::move(gpu_indices),
                                                   std::move(features), std::move(options));
      }))
      .def_static("expected_sampled_counts", &ServingRuntime::expected_sampled_counts)
      .def("submit", &ServingRuntime::submit)
      .def("wait", &ServingRuntime::wait)
      .def("forget", &ServingRuntime::forget)
      .def("collect", &ServingRuntime::collect)
      .def("next_collected", &ServingRuntime::next_collected)
      .def("take", &ServingRuntime::take)
      // (id, node_ids, x, seed_count, edge_index per layer, layer sizes, target); id -1 and
      // empty tensors once closed and drained.
      .def("next_batch",
           [](const c10::intrusive_ptr<ServingRuntime>& self) {
             ServedBatch b = self->next_batch();
             if (b.id < 0) b.node_ids = b.x = at::empty({0}, at::kLong);
             return std::make_tuple(b.id, b.node_ids, b.x, b.seed_count, b.edge_index,
                                    b.layer_sizes, b.target);
           })
      .def("finish", &ServingRuntime::finish)
      .def("fail", &ServingRuntime::fail)
      .def("serve_package", &ServingRuntime::serve_package)
      .def("close", &ServingRuntime::close)
      .def("stop_holding_batches", &ServingRuntime::stop_holding_batches)
      .def("cost", &ServingRuntime::cost)
      .def("target_of", &ServingRuntime::target_of)
      .def("threshold", &ServingRuntime::threshold)
      .def("set_threshold", &ServingRuntime::set_threshold)
      .def("dispatches_by_load", &ServingRuntime::dispatches_by_load)
      .def("calibrate", &ServingRuntime::calibrate)
      .def_static("calibration_sizes", &ServingRuntime::calibration_sizes)
      .def("psgs", [](const c10::intrusive_ptr<ServingRuntime>& self) { return self->psgs(); })
      .def("records", &ServingRuntime::records)
      .def("accepted", &ServingRuntime::accepted)
      .def("queued", &ServingRuntime::queued)
      .def("outstanding", &ServingRuntime::outstanding)
      .def("answered_batches", &ServingRuntime::answered_batches)
      .def("num_nodes", &ServingRuntime::num_nodes)
      .def("max_batch_nodes",
           [](const c10::intrusive_ptr<ServingRuntime>& self) {
             return self->options().max_batch_nodes;
           })
      .def("max_queue_nodes", [](const c10::intrusive_ptr<ServingRuntime>& self) {
        return self->options().max_queue_nodes;
      })
      .def("max_queue", [](const c10::intrusive_ptr<ServingRuntime>& self) {
        return self->options().max_queue;
      });
  m.class_<FetchWork>("FetchWork").def("wait", &FetchWork::wait).def("done", &FetchWork::done);
  m.class_<DistFeature>("DistFeature")
      .def(torch::init<c10::intrusive_ptr<ShardMap>, c10::intrusive_ptr<FeatureTiers>,
                       c10::intrusive_ptr<Transport>>())
      .def("gather", &DistFeature::gather, "",
           {torch::arg("ids"), torch::arg("host_read_blocks") = 0})
      .def("gather_async", &DistFeature::gather_async, "",
           {torch::arg("ids"), torch::arg("host_read_blocks") = 0})
      .def("host", &DistFeature::host)
      .def("num_hosts", &DistFeature::num_hosts)
      .def("last_local_fraction", &DistFeature::last_local_fraction)
      .def("shard_map", &DistFeature::shard_map)
      .def("local", &DistFeature::local)
      .def("transport", &DistFeature::transport)
      // A traced gather needs only what its rows look like: a table of no rows with the
      // local table's dtype and row shape (the rows land on the ids' device).
      .def("__obj_flatten__", [](const c10::intrusive_ptr<DistFeature>& self) {
        const at::Tensor first_tier = self->local()->tiers().front();
        const std::vector<int64_t> row_shape = rows_like(first_tier, 0);
        return std::make_tuple(
            std::make_tuple(std::string("no_rows"), at::empty(row_shape, first_tier.options())),
            std::make_tuple(std::string("num_rows"), self->shard_map()->num_rows()),
            std::make_tuple(std::string("host"), self->host()),
            std::make_tuple(std::string("num_hosts"), self->num_hosts()));
      });
}

}  // namespace quiver::runtime
