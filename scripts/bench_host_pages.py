"""Host-tier experiment: zero-copy random row reads from a pinned host table, by table size,
with the table on 4 KB pages or on 2 MB transparent huge pages (madvise before the pages
are first touched, then registered in place with cudaHostRegister), beside the CPU-gather
baseline (16 threads index_select into pinned memory, then one copy), the op's own staged
reads (a ``FeatureTiers`` with ``set_stage_host_rows(True)``: CPU threads gather slices into
pinned staging while the copy engine moves the slices before) and the pinned copy.

    python scripts/bench_host_pages.py --sizes 1,4,16,32 --row-bytes 256
    python scripts/bench_host_pages.py --sizes 16,32 --pages 4k --split 0.5,0.67,0.8

--split F also times a split gather: the GPU reads 1 - F of the rows with zero copy while
CPU threads gather the other F into pinned memory (index_select) and one copy moves them.

Each size allocates one anonymous mapping, so AnonHugePages in /proc/meminfo says how much
of it the kernel really backed with huge pages.
"""
from __future__ import annotations

import argparse
import gc
import json
import mmap
import time

import torch

import torch_quiver_ops as qv
from torch_quiver_ops import _cli


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def host_table(nbytes, pages):
    """A table on 4 KB pages ("4k"), on huge pages from its first touch ("2m"), or touched
    on 4 KB pages and then moved onto huge pages by ``uva.back_with_huge_pages``
    ("collapse", what a staged Feature does to a table it is handed)."""
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buffer.madvise(mmap.MADV_HUGEPAGE if pages == "2m" else mmap.MADV_NOHUGEPAGE)
    table = torch.frombuffer(buffer, dtype=torch.uint8)
    before = meminfo("AnonHugePages")
    table.fill_(1)  # first touch: the kernel picks the page size here
    if pages == "collapse":
        start = time.perf_counter()
        done = qv.uva.back_with_huge_pages(table)
        print(f"   back_with_huge_pages: {done} in {time.perf_counter() - start:.1f} s",
              flush=True)
    return buffer, table, meminfo("AnonHugePages") - before


def rate(fn, batches, out_bytes, reps=10):
    """GB/s of fn(batch) over `reps` calls, each on the next of `batches` (distinct random
    batches, so that the host's last-level cache, 300 MB on the H100 host, cannot serve a
    batch read just before)."""
    fn(batches[-1])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(reps):
        fn(batches[k % len(batches)])
    torch.cuda.synchronize()
    return reps * out_bytes / (time.perf_counter() - start) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,4,16,32", help="table sizes in GiB")
    parser.add_argument("--row-bytes", type=int, default=256)
    parser.add_argument("--rows-per-batch", type=int, default=545_000)
    parser.add_argument("--batches", type=int, default=8, help="distinct batches, read in turn")
    parser.add_argument("--pages", default="4k,2m",
                        help="comma list of 4k, 2m, collapse (4k then back_with_huge_pages)")
    parser.add_argument("--split", default="", help="CPU shares of a split gather, e.g. 0.5,0.67")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    _cli.require_gpu(parser)
    print(f"device: {torch.cuda.get_device_name()}; CPU threads {torch.get_num_threads()}; "
          f"THP: {open('/sys/kernel/mm/transparent_hugepage/enabled').read().strip()}")
    width = args.row_bytes // 4
    results = []
    pinned_out = torch.empty(args.rows_per_batch, width, dtype=torch.float32).pin_memory()
    print(f"\n| table GiB | pages | huge GiB | zero-copy GB/s | sorted ids GB/s | "
          f"CPU gather + copy GB/s | staged op GB/s |\n|---|---|---|---|---|---|---|")
    for gib in (float(s) for s in args.sizes.split(",")):
        nbytes = int(gib * 2**30) // args.row_bytes * args.row_bytes
        rows = nbytes // args.row_bytes
        gen = torch.Generator(device="cuda").manual_seed(int(gib * 10))
        batches = [torch.randint(rows, (args.rows_per_batch,), device="cuda", generator=gen)
                   for _ in range(args.batches)]
        sorted_batches = [ids.sort().values for ids in batches]
        cpu_batches = [ids.cpu() for ids in batches]
        out_bytes = args.rows_per_batch * args.row_bytes
        for pages in args.pages.split(","):
            huge = pages != "4k"
            buffer, raw, huge_bytes = host_table(nbytes, pages)
            table = raw.view(torch.float32).view(rows, width)
            handle = qv.uva.pin_in_place(table)
            zero_copy = rate(lambda ids: qv.ops.gather_rows(table, ids), batches, out_bytes)
            in_order = rate(lambda ids: qv.ops.gather_rows(table, ids), sorted_batches,
                            out_bytes)
            # Each call waits for the previous copy out of pinned_out: no overlap across calls.
            staged = rate(lambda ids: (torch.cuda.synchronize(), torch.index_select(
                table, 0, ids, out=pinned_out).to("cuda", non_blocking=True)), cpu_batches,
                out_bytes, reps=3)
            staged_layout = torch.classes.quiver.FeatureTiers([table], None)
            staged_layout.set_stage_host_rows(True)
            staged_call = staged_layout.gather
            rate(staged_call, batches, out_bytes, reps=10)  # the op's GPU/CPU split settles
            staged_op = rate(staged_call, batches, out_bytes, reps=20)
            splits = {}
            for share in (float(f) for f in args.split.split(",") if f):
                k = int(share * args.rows_per_batch)
                out = torch.empty(args.rows_per_batch, width, device="cuda")

                def split_gather(k_ids):
                    ids, cpu_ids = k_ids
                    torch.cuda.synchronize()  # pinned_out is free again
                    on_gpu = qv.ops.gather_rows(table, ids[k:])  # queued; runs while CPUs gather
                    torch.index_select(table, 0, cpu_ids[:k], out=pinned_out[:k])
                    out[:k].copy_(pinned_out[:k], non_blocking=True)
                    out[k:].copy_(on_gpu)
                    return out

                splits[share] = rate(split_gather, list(zip(batches, cpu_batches)), out_bytes,
                                     reps=3)
                print(f"   split, CPU share {share:.2f}: {splits[share]:.1f} GB/s", flush=True)
            row = {"gib": gib, "pages": pages, "huge": huge, "huge_gib": huge_bytes / 2**30,
                   "zero_copy_gbps": zero_copy, "sorted_gbps": in_order, "cpu_gather_gbps": staged,
                   "staged_op_gbps": staged_op, "split_gbps": splits}
            results.append(row)
            names = {"4k": "4 KB", "2m": "2 MB (THP)", "collapse": "4 KB, then collapsed"}
            print(f"| {gib:g} | {names[pages]} | {huge_bytes / 2**30:.1f} | "
                  f"{zero_copy:.1f} | {in_order:.1f} | {staged:.1f} | {staged_op:.1f} |",
                  flush=True)
            del handle, table, raw
            gc.collect()
            buffer.close()
    src = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
    dst = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    copy = rate(lambda _: dst.copy_(src, non_blocking=True), [None], 1 << 30)
    print(f"\npinned host-to-device copy: {copy:.1f} GB/s (the bound); rows of "
          f"{args.row_bytes} bytes, {args.rows_per_batch:,} random ids a batch, "
          f"{args.batches} batches in turn")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
