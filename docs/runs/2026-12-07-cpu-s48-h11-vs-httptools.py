"""p50/p99 of sequential keep-alive POST /predict requests to serve_http's uvicorn endpoint,
with uvicorn's httptools parser and with h11, in turns (a tiny graph; the runtime's own time
is the same in both)."""
import http.client, json, statistics, sys, time
sys.path.insert(0, "/work/main/tests/python")
import torch
import torch_quiver_ops as qv
import torch_quiver_ops.serving as serving
from torch_quiver_ops.serving import ServingRuntime, serve_http
from torch_quiver_ops.synthetic import synthetic_graph
from test_serving import SAGE

g = synthetic_graph("tiny", seed=0)
topo = qv.CSRTopo(g.edge_index, num_nodes=g.num_nodes)
rt = ServingRuntime(SAGE([g.x.size(1), 16, int(g.y.max()) + 1]), topo, [5, 3], g.x, device="cpu",
                    gpu_streams=0, max_wait_ms=0.0)
import uvicorn
original = uvicorn.Config.__init__

def run(http, n=1500):
    def patched(self, *a, **k):
        k["http"] = http
        original(self, *a, **k)
    uvicorn.Config.__init__ = patched
    server = serve_http(rt, server="uvicorn")
    host, port = server.url[7:].split(":")
    conn = http.client.HTTPConnection(host, int(port)) if False else __import__("http.client").client.HTTPConnection(host, int(port))
    body = json.dumps({"nodes": [1, 2, 3]})
    lat = []
    for i in range(n):
        t = time.perf_counter()
        conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
        r = conn.getresponse(); r.read()
        lat.append(time.perf_counter() - t)
    conn.close(); server.shutdown()
    lat = sorted(lat[200:])
    return 1e3 * statistics.median(lat), 1e3 * lat[int(0.99 * len(lat)) - 1]

for turn in range(3):
    for http in ("httptools", "h11"):
        p50, p99 = run(http)
        print(f"turn {turn} {http:<9} p50 {p50:.3f} ms  p99 {p99:.3f} ms", flush=True)
rt.close()
