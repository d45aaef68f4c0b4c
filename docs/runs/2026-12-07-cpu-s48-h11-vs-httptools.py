"""p50/p99 of sequential keep-alive POST /predict requests to serve_http's uvicorn endpoint,
with uvicorn's httptools parser and with h11, in turns (a tiny graph; a runtime of its own
for each run, since shutting an endpoint down closes its runtime; every answer a 200)."""
import http.client
import json
import statistics
import sys
import time

sys.path.insert(0, "/work/main/tests/python")
import uvicorn  # noqa: E402

import torch_quiver_ops as qv  # noqa: E402
from torch_quiver_ops.serving import ServingRuntime, serve_http  # noqa: E402
from torch_quiver_ops.synthetic import synthetic_graph  # noqa: E402
from test_serving import SAGE  # noqa: E402

graph = synthetic_graph("tiny", seed=0)
topo = qv.CSRTopo(graph.edge_index, num_nodes=graph.num_nodes)
model = SAGE([graph.x.size(1), 16, int(graph.y.max()) + 1])
original = uvicorn.Config.__init__


def run(parser: str, requests: int = 1500, warm_up: int = 200):
    def with_parser(self, *args, **kwargs):
        kwargs["http"] = parser
        original(self, *args, **kwargs)

    uvicorn.Config.__init__ = with_parser
    runtime = ServingRuntime(model, topo, [5, 3], graph.x, device="cpu", gpu_streams=0,
                             max_wait_ms=0.0)
    server = serve_http(runtime, server="uvicorn")
    host, port = server.url[len("http://"):].split(":")
    connection = http.client.HTTPConnection(host, int(port))
    body = json.dumps({"nodes": [1, 2, 3]})
    latencies = []
    for _ in range(requests):
        start = time.perf_counter()
        connection.request("POST", "/predict", body, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
        latencies.append(time.perf_counter() - start)
    connection.close()
    server.shutdown()  # (closes the runtime too)
    timed = sorted(latencies[warm_up:])
    return 1e3 * statistics.median(timed), 1e3 * timed[int(0.99 * len(timed)) - 1]


for turn in range(3):
    for parser in ("httptools", "h11"):
        p50, p99 = run(parser)
        print(f"turn {turn} {parser:<9} p50 {p50:.3f} ms  p99 {p99:.3f} ms", flush=True)
