"""RDMA probes: each scenario runs in two forked processes (host 0, host 1) over rxe0."""
import os, sys, time, json, socket, threading, traceback, subprocess
import multiprocessing as mp
from datetime import timedelta
t0 = time.monotonic()
import torch
import torch.distributed as dist
import torch_quiver_ops as qv
print(f"[import {time.monotonic()-t0:.0f}s] rdma_available={torch.classes.quiver.Transport.rdma_available()}", flush=True)

OUT = os.environ.get("PROBE_OUT", "/tmp/probe_out")
os.makedirs(OUT, exist_ok=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(rank, msg):
    with open(f"{OUT}/{CUR}.{rank}.log", "a") as f:
        f.write(msg + "\n")


def table(rows, width, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, width, generator=g) * 100).to(dtype)


def make(rank, rows=2000, width=4, dtype=torch.float32, timeout=10.0, rdma=None, x=None, fraction=0.0):
    x = table(rows, width, dtype) if x is None else x
    sm = qv.dist.build_shard_map(x.size(0), 2, None, fraction)
    local = qv.Feature(device_list=[])
    local.from_cpu_tensor(x[sm.local_ids(rank)].clone())
    f = qv.dist.DistFeature(sm, local, transport="rdma", timeout=timeout, rdma=rdma)
    return x, sm, local, f


def remote_ids(sm, rank):
    return sm.local_ids(1 - rank)


# ---------------------------------------------------------------- scenarios
def s_mid_fetch_death(rank):
    x, sm, local, f = make(rank, rows=20000, width=16, timeout=10.0, rdma={"staging_bytes": 1 << 14})
    dist.barrier()
    if rank == 1:
        time.sleep(1.5)
        log(rank, "exiting")
        os._exit(0)
    ids = remote_ids(sm, rank).repeat(5)
    n = 0
    began = time.monotonic()
    try:
        while time.monotonic() - began < 60:
            out = f[ids]
            assert torch.equal(out, x[ids]), "WRONG ROWS"
            n += 1
        log(rank, f"NO ERROR after {n} fetches")
    except Exception as e:
        log(rank, f"error after {n} fetches, {time.monotonic()-began:.1f}s since start: {type(e).__name__}: {str(e)[:600]}")
    t = time.monotonic()
    try:
        f[ids[:10]]
        log(rank, "second fetch returned!")
    except Exception as e:
        log(rank, f"second fetch {time.monotonic()-t:.1f}s: {type(e).__name__}: {str(e)[:300]}")
    os._exit(0)


def s_replaced_table(rank):
    x, sm, local, f = make(rank, rows=2000, width=4, timeout=10.0)
    dist.barrier()
    mine = sm.local_ids(rank)
    if rank == 1:
        new = (x[mine] + 1000).clone()
        local.from_cpu_tensor(new)  # replace host 1's table after the DistFeature was built
        log(rank, f"own rows via local[]: new={torch.equal(local[torch.arange(len(mine))], new)}")
        got = f[mine]
        log(rank, f"own rows via DistFeature: old={torch.equal(got, x[mine])} new={torch.equal(got, x[mine]+1000)}")
    dist.barrier()
    if rank == 0:
        ids = remote_ids(sm, rank)
        got = f[ids]
        log(rank, f"host1 rows via RDMA after host1 replaced: old={torch.equal(got, x[ids])} new={torch.equal(got, x[ids]+1000)}")
    dist.barrier()
    # host 1 now writes its served table in place
    if rank == 1:
        local.table.add_(5000)
    dist.barrier()
    if rank == 0:
        ids = remote_ids(sm, rank)
        got = f[ids]
        log(rank, f"after in-place write on new table: old={torch.equal(got, x[ids])} new={torch.equal(got, x[ids]+1000)} new+5000={torch.equal(got, x[ids]+6000)}")
    dist.barrier()
    # host 1 closes its local Feature (lets go of its table)
    if rank == 1:
        local.close()
        try:
            f[mine[:3]]
            log(rank, "own gather after local.close() returned")
        except Exception as e:
            log(rank, f"own gather after local.close(): {type(e).__name__}: {str(e)[:200]}")
    dist.barrier()
    if rank == 0:
        ids = remote_ids(sm, rank)
        try:
            got = f[ids]
            log(rank, f"RDMA read of host1 after host1 local.close(): returned rows, old={torch.equal(got, x[ids])}")
        except Exception as e:
            log(rank, f"RDMA read after host1 local.close(): {type(e).__name__}: {str(e)[:200]}")
    dist.barrier()
    f.close()
    log(rank, "done")


def s_close_while_reading(rank):
    x, sm, local, f = make(rank, rows=20000, width=16, timeout=10.0, rdma={"staging_bytes": 1 << 14})
    dist.barrier()
    ids = remote_ids(sm, rank).repeat(2)
    stats = {"ok": 0, "wrong": 0, "err": []}
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                out = f[ids]
                if torch.equal(out, x[ids]):
                    stats["ok"] += 1
                else:
                    stats["wrong"] += 1
            except Exception as e:
                stats["err"].append(f"{type(e).__name__}: {str(e)[:250]}")
                if len(stats["err"]) > 3:
                    return
    pend = None
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    time.sleep(1.5)
    if rank == 0:
        pend = f.gather_async(ids)
    t = time.monotonic()
    try:
        f.close()
        log(rank, f"close returned in {time.monotonic()-t:.1f}s")
    except Exception as e:
        log(rank, f"close raised in {time.monotonic()-t:.1f}s: {type(e).__name__}: {str(e)[:300]}")
    if pend is not None:
        try:
            out = pend.wait(30)
            log(rank, f"async after close: correct={torch.equal(out, x[ids])}")
        except Exception as e:
            log(rank, f"async after close: {type(e).__name__}: {str(e)[:300]}")
    time.sleep(2)
    stop.set()
    th.join(30)
    log(rank, f"reader alive={th.is_alive()} ok={stats['ok']} wrong={stats['wrong']} errs={stats['err'][:3]}")
    os._exit(0)


def s_peer_never_closes(rank):
    x, sm, local, f = make(rank, rows=2000, width=4, timeout=8.0)
    dist.barrier()
    if rank == 0:
        t = time.monotonic()
        try:
            f.close()
            log(rank, f"close returned in {time.monotonic()-t:.1f}s")
        except Exception as e:
            log(rank, f"close raised in {time.monotonic()-t:.1f}s: {type(e).__name__}: {str(e)[:300]}")
    else:
        ids = remote_ids(sm, rank)
        t = time.monotonic()
        res = {"ok": 0, "wrong": 0}
        while time.monotonic() - t < 14:
            try:
                out = f[ids]
                res["ok" if torch.equal(out, x[ids]) else "wrong"] += 1
            except Exception as e:
                log(rank, f"peer closed: error after {time.monotonic()-t:.1f}s: {type(e).__name__}: {str(e)[:300]}")
                break
            time.sleep(0.2)
        log(rank, f"reads while peer closing: {res}")
    os._exit(0)


def s_mismatch(rank):
    # width mismatch
    for label, kw in [("width", dict(width=4 if rank == 0 else 8)),
                      ("dtype_same_bytes", dict(dtype=torch.float32 if rank == 0 else torch.int32)),
                      ]:
        t = time.monotonic()
        try:
            make(rank, rows=200, timeout=10.0, **kw)
            log(rank, f"{label}: NO ERROR")
        except Exception as e:
            log(rank, f"{label}: {time.monotonic()-t:.1f}s {type(e).__name__}: {str(e)[:300]}")
        dist.barrier()
    # row counts: host 1 serves one row fewer than the shard map says
    x = table(200, 4)
    sm = qv.dist.build_shard_map(200, 2, None, 0.0)
    local = qv.Feature(device_list=[])
    rows = x[sm.local_ids(rank)].clone()
    if rank == 1:
        rows = rows[:-1].clone()
    local.from_cpu_tensor(rows)
    t = time.monotonic()
    try:
        f = qv.dist.DistFeature(sm, local, transport="rdma", timeout=10.0)
        log(rank, "short table: NO ERROR at build")
        if rank == 0:
            ids = remote_ids(sm, rank)
            try:
                out = f[ids]
                log(rank, f"short table: read returned {tuple(out.shape)}")
            except Exception as e:
                log(rank, f"short table read: {type(e).__name__}: {str(e)[:300]}")
    except Exception as e:
        log(rank, f"short table: {time.monotonic()-t:.1f}s {type(e).__name__}: {str(e)[:300]}")
    dist.barrier()
    # host 1's table longer than the map says: extra rows
    rows = x[sm.local_ids(rank)].clone()
    if rank == 1:
        rows = torch.cat([rows, rows[:5]])
    local = qv.Feature(device_list=[])
    local.from_cpu_tensor(rows)
    try:
        f = qv.dist.DistFeature(sm, local, transport="rdma", timeout=10.0)
        log(rank, "long table: NO ERROR at build")
        if rank == 0:
            ids = remote_ids(sm, rank)
            log(rank, f"long table read correct={torch.equal(f[ids], x[ids])}")
        dist.barrier()
        f.close()
    except Exception as e:
        log(rank, f"long table: {type(e).__name__}: {str(e)[:300]}")
    log(rank, "done")


def s_ids(rank):
    x, sm, local, f = make(rank, rows=3000, width=4, timeout=10.0)
    cases = {
        "empty": torch.empty(0, dtype=torch.long),
        "empty_int32": torch.empty(0, dtype=torch.int32),
        "oob": torch.tensor([0, 3000]),
        "neg": torch.tensor([-1]),
        "int32": remote_ids(sm, rank)[:50].int(),
        "2d": remote_ids(sm, rank)[:12].reshape(3, 4),
        "huge_id": torch.tensor([2**62]),
    }
    for name, ids in cases.items():
        try:
            out = f[ids]
            ok = torch.equal(out, x[ids.long()]) if ids.numel() and name not in ("oob", "neg", "huge_id") else None
            log(rank, f"{name}: shape={tuple(out.shape)} correct={ok}")
        except Exception as e:
            log(rank, f"{name}: {type(e).__name__}: {str(e)[:200]}")
    # the transport still works after refused ids?
    ids = remote_ids(sm, rank)
    log(rank, f"after refusals correct={torch.equal(f[ids], x[ids])}")
    # big batch: consecutive and random
    for name, ids in [("big_consecutive", torch.arange(3000).repeat(60)),
                      ("big_random", torch.randint(3000, (200000,)))]:
        t = time.monotonic()
        try:
            out = f[ids]
            log(rank, f"{name}: {time.monotonic()-t:.1f}s correct={torch.equal(out, x[ids])}")
        except Exception as e:
            log(rank, f"{name}: {type(e).__name__}: {str(e)[:300]}")
    dist.barrier()
    f.close()
    # staging 0 (one row per chunk), odd row size (3 bytes)
    x8 = torch.randint(0, 255, (500, 3), dtype=torch.uint8)
    x, sm, local, f = make(rank, x=x8, timeout=10.0, rdma={"staging_bytes": 0, "qps_per_peer": 3})
    ids = torch.randint(500, (3000,))
    ids2 = torch.arange(500)
    log(rank, f"uint8x3 staging0: correct={torch.equal(f[ids], x[ids])} seq={torch.equal(f[ids2], x[ids2])}")
    dist.barrier()
    f.close()
    # rows over 1 MiB
    xb = torch.randn(12, 300000)
    x, sm, local, f = make(rank, x=xb, timeout=20.0, rdma={"staging_bytes": 1 << 20})
    ids = torch.tensor([11, 0, 1, 2, 5, 5, 3, 4, 6, 7, 8, 9, 10])
    log(rank, f"1.2MB rows: correct={torch.equal(f[ids], x[ids])}")
    dist.barrier()
    f.close()
    # staging not a multiple of row bytes
    x, sm, local, f = make(rank, rows=1000, width=5, timeout=10.0, rdma={"staging_bytes": 50})
    ids = torch.arange(1000).flip(0)
    ids2 = torch.arange(1000)
    log(rank, f"staging 50B rows 20B: correct={torch.equal(f[ids], x[ids])} seq={torch.equal(f[ids2], x[ids2])}")
    dist.barrier()
    f.close()
    log(rank, "done")


def resources():
    fds = len(os.listdir("/proc/self/fd"))
    threads = len(os.listdir("/proc/self/task"))
    rss = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                rss = int(line.split()[1]) // 1024
            if line.startswith("VmLck"):
                lck = int(line.split()[1])
    pid = os.getpid()
    def count(kind):
        try:
            out = subprocess.run(["rdma", "res", "show", kind], capture_output=True, text=True, timeout=20).stdout
            return sum(1 for l in out.splitlines() if f"pid {pid} " in l or l.rstrip().endswith(f"pid {pid}"))
        except Exception as e:
            return f"?{e}"
    return dict(fds=fds, threads=threads, rss_mb=rss, vmlck_kb=lck, qp=count("qp"), mr=count("mr"), cq=count("cq"), pd=count("pd"))


def s_cycles(rank):
    x = table(4000, 16)
    sm = qv.dist.build_shard_map(4000, 2, None, 0.0)
    local = qv.Feature(device_list=[])
    local.from_cpu_tensor(x[sm.local_ids(rank)].clone())
    ids = remote_ids(sm, rank)
    log(rank, f"before: {resources()}")
    for i in range(16):
        f = qv.dist.DistFeature(sm, local, transport="rdma", timeout=10.0, rdma={"qps_per_peer": 4})
        assert torch.equal(f[ids], x[ids])
        if i == 0:
            log(rank, f"open: {resources()}")
        f.close()
        del f
        if i in (0, 1, 7, 15):
            log(rank, f"after close {i}: {resources()}")
    # without close(): dropped
    for i in range(4):
        f = qv.dist.DistFeature(sm, local, transport="rdma", timeout=10.0)
        dist.barrier()
        del f
    import gc; gc.collect()
    log(rank, f"after 4 dropped without close: {resources()}")
    log(rank, "done")


def s_long_timeout_death(rank):
    x, sm, local, f = make(rank, rows=4000, width=16, timeout=float(os.environ.get("LONG_T", "100")))
    dist.barrier()
    if rank == 1:
        time.sleep(1)
        os._exit(0)
    ids = remote_ids(sm, rank)
    began = time.monotonic()
    n = 0
    try:
        while time.monotonic() - began < 300:
            f[ids]
            n += 1
        log(rank, "NO ERROR")
    except Exception as e:
        log(rank, f"error after {n} fetches, {time.monotonic()-began:.1f}s: {type(e).__name__}: {str(e)[:400]}")
    os._exit(0)


def s_close_inflight(rank):
    # host 0 starts a fetch on the side thread, then closes at once, as host 1 does
    x, sm, local, f = make(rank, rows=20000, width=16, timeout=20.0, rdma={"staging_bytes": 1 << 14})
    dist.barrier()
    ids = remote_ids(sm, rank).repeat(4)
    pend = f.gather_async(ids) if rank == 0 else None
    t = time.monotonic()
    f.close()
    log(rank, f"close returned in {time.monotonic()-t:.2f}s")
    if pend is not None:
        t = time.monotonic()
        try:
            out = pend.wait(120)
            log(rank, f"in-flight fetch after close: {time.monotonic()-t:.1f}s correct={torch.equal(out, x[ids])}")
        except Exception as e:
            log(rank, f"in-flight fetch after close: {time.monotonic()-t:.1f}s {type(e).__name__}: {str(e)[:400]}")
    else:
        time.sleep(30)  # host 1 stays alive (its process is not dead)
    log(rank, "done")
    os._exit(0)


def s_local_close(rank):
    x, sm, local, f = make(rank, rows=2000, width=4, timeout=10.0)
    dist.barrier()
    mine = sm.local_ids(rank)
    if rank == 1:
        local.close()
        try:
            out = f[mine[:3]]
            log(rank, f"own gather after local.close() returned correct={torch.equal(out, x[mine[:3]])}")
        except Exception as e:
            log(rank, f"own gather after local.close(): {type(e).__name__}: {str(e)[:200]}")
    dist.barrier()
    if rank == 0:
        ids = remote_ids(sm, rank)
        try:
            got = f[ids]
            log(rank, f"RDMA read of host1 after host1 local.close(): returned rows, correct={torch.equal(got, x[ids])}")
        except Exception as e:
            log(rank, f"RDMA read after host1 local.close(): {type(e).__name__}: {str(e)[:200]}")
    dist.barrier()
    f.close()
    log(rank, "done")


SCEN = {k[2:]: v for k, v in globals().items() if k.startswith("s_")}


def child(name, rank, port):
    global CUR
    CUR = name
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2, timeout=timedelta(seconds=120))
        SCEN[name](rank)
    except BaseException as e:
        log(rank, f"UNCAUGHT {type(e).__name__}: {str(e)[:500]}\n{traceback.format_exc()[-1500:]}")
    finally:
        os._exit(0)


def run(name, limit):
    global CUR
    CUR = name
    ctx = mp.get_context("fork")
    port = free_port()
    t = time.monotonic()
    procs = [ctx.Process(target=child, args=(name, r, port)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(max(1, limit - (time.monotonic() - t)))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    print(f"=== {name} ({time.monotonic()-t:.0f}s) exit={[p.exitcode for p in procs]} HUNG={hung}", flush=True)
    for r in range(2):
        try:
            print(f"--- host {r}\n" + open(f"{OUT}/{name}.{r}.log").read(), flush=True)
        except FileNotFoundError:
            print(f"--- host {r}: no log", flush=True)


if __name__ == "__main__":
    CUR = "main"
    for spec in sys.argv[1:]:
        name, limit = spec.split(":")
        run(name, float(limit))
